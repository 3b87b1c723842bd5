"""The model: ResidualGPT (gpt.py), its sublayers and mixers, its activation cache, its dropout streams, the next
token (next_token.py), the Python API's boundary checks (api.py) and a checkpoint's vocabulary (vocab.py).
"""
