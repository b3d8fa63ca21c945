"""Moved: the tokenizer is :mod:`genlab.tokenizer` (it turns text into ids and back; it
produces no logits). Names read from here still work, with a DeprecationWarning, until the
next release."""

from ..moved import moved_to

__getattr__ = moved_to("genlab.models.tokenizer", "genlab.tokenizer")
