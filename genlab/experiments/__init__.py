"""Experiments over many generations: teacher-forced scoring, sweeps, best-of-N and
coverage, evaluation, model agreement and task sets."""
