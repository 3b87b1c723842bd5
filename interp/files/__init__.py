"""What is written and read: durable file I/O (io.py), checkpoints (checkpoint.py) and nanoGPT's (nanogpt_format.py),
GPT-2's files (gpt2.py), tokenizers (tokenizers.py), and every file kind checked before use (checks/).
"""
