"""CAPS's SAC+BC backbone (paper, "SAC+BC Instantiation"): its pure losses (``losses.py``) and what the learner asks
of it (``backbone.py``)."""
