"""A model's configuration, before torch: ModelConfig (model_config.py), the mixer registry its mixer names
come from (registry.py), and what a config takes in memory (memory.py). Importing these modules imports no
torch; validating a config with self_bias != 0 asks its mixer's class whether it takes one, which loads the
built-in mixers and torch.

    model_config.py ModelConfig: frozen dataclass, validated on construction (mixer names via registry,
                   mixer_params against what the mixer declares)
    registry.py    the mixer registry: register_mixer, mixer_spec(name), MIXERS (light: no torch; the
                   built-ins load on first lookup through the loader interp/__init__.py hands in)
    memory.py      what a ModelConfig takes in memory and what a device has: the one estimate
"""
