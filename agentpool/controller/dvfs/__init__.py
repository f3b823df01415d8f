"""The DVFS fallback controllers (Joulie's and the adaptive one), and the choice between them.

Owns: pure state machines fed one power reading per tick.
Never: I/O; the node controller applies what they decide.
"""
