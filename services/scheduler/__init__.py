"""The scheduler service: the pure Fit/score core (fit.py, score.py), explain, the extender."""
