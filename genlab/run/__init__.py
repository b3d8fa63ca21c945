"""The Run and its parts: the step loop (:mod:`genlab.run.engine`), its state and plan,
its records and result, its timeline for rewinding, forks, randomness, inputs and trace."""
