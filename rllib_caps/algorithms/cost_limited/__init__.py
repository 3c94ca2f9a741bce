"""What the algorithms trained for one cost limit κ share (BC, BEAR-Lag, CPQ, COptiDICE): their config base
(``cost_limited``) and the Lagrangian multipliers (``lagrangian``)."""
