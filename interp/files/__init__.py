"""What is written and read: durable file I/O (io.py), checkpoints (checkpoint.py) and nanoGPT's (nanogpt_format.py),
GPT-2's files (gpt2.py), tokenizers (tokenizers.py), and every file kind checked before use (checks/).

    io.py          durable file I/O: atomic write + fsync, strict JSON and JSON lines (no NaN)
    checkpoint.py  save / load (atomic, weights_only, versioned schema, content hash); a nanoGPT
                   train.py checkpoint loads too
    nanogpt_format.py  nanoGPT's names, model_args and meta.pkl; reading a train.py checkpoint (light; below
                   checkpoint.py, which reads nanoGPT files through it)
    gpt2.py        GPT-2 facts: vocabulary size, its files' checksums, where they lie (gpt2_files)
    tokenizers.py  Hugging Face tokenizers for an export (char, GPT-2 BPE); tokenizer_for
    checks/        every file kind read, checked before use (one module each; see its __init__):
      checkpoint_file.py  own ckpt.pt: payload, weights against the config, vocabulary, check_finite
      nanogpt_file.py  nanoGPT's ckpt.pt and meta.pkl
"""
