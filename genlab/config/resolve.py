"""The config of one ``generate`` call: the first stage of a run's set-up.

:func:`prepare_config` builds the GenerationConfig a call asks for, with the reference's
precedence: explicit keyword arguments > the given config > the model's generation
defaults > the global defaults. It validates nothing yet: the plan
(:func:`genlab.run.plan.make_plan`) does, once the prompt is known.
"""

from __future__ import annotations

import copy

from .generation import GenerationConfig

#: the special tokens a model knows even without a generation_config.json
SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")


def model_defaults(info) -> dict:
    """The generation defaults of a model (its ``ModelInfo``): its generation config's
    fields, with the special tokens it leaves unset taken from the model (as transformers
    derives a generation config from the model config)."""
    defaults = dict(info.generation_defaults or {})
    for key in SPECIAL_TOKENS:
        if defaults.get(key) is None and getattr(info, key, None) is not None:
            defaults[key] = getattr(info, key)
    return defaults


def default_config(info) -> GenerationConfig:
    """A model's defaults (:func:`model_defaults`) as a GenerationConfig."""
    defaults = model_defaults(info)
    return GenerationConfig.from_dict(defaults) if defaults else GenerationConfig()


def prepare_config(model, generation_config=None, use_model_defaults=None, **kwargs):
    """Base config (the model's defaults or the given one) updated with ``kwargs``.

    model: a genlab-protocol model (its ``info`` gives the generation defaults);
    generation_config: a GenerationConfig or a dict, or None for the model's defaults;
    use_model_defaults: False to leave the given config's unset fields at the global
    defaults; kwargs: config fields (others are returned, they may be model inputs).

    Returns ``(config, unused_kwargs)``, mirroring the reference's precedence: explicit
    kwargs > the given config > the model's generation defaults > global defaults.
    """
    defaults = model_defaults(model.info)
    if generation_config is None:
        config = default_config(model.info)
    else:
        config = copy.deepcopy(GenerationConfig.from_any(generation_config))
        if use_model_defaults is not False and defaults:
            plain = GenerationConfig()
            for key, value in defaults.items():
                if key.startswith("_") or key == "transformers_version":
                    continue
                if getattr(config, key, None) == getattr(plain, key, None) and value != getattr(
                    plain, key, None
                ):
                    setattr(config, key, value)
            if config.temperature == 0.0:
                config.do_sample = False
    unused = config.update(**kwargs)
    return config, unused
