"""Inside the model: hook points, the logit lens and attention, steering, patching and
attribution."""
