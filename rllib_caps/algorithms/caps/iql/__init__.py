"""CAPS's IQL backbone (paper Eq. 8-9): its pure losses (``losses.py``) and what the learner asks of it
(``backbone.py``)."""
