"""A model's configuration, before torch: ModelConfig (model_config.py), the mixer registry its mixer names
come from (registry.py), and what a config takes in memory (memory.py). Nothing here imports torch.
"""
