"""Fault injection against a real 3-node quorum, with a history checker (issues 7 and 30).

``python -m tests.faults --seed S --duration D`` (``make faults SEED=S DURATION=D``) runs faults drawn from a
seed, ``--schedule a,b,c`` an explicit list; ``pytest tests/faults`` runs the checker's own tests, the
durability edges and the explicit schedule of every fault; ``make mutants`` checks that the checker's
tests catch every deleted or negated branch. See RELIABILITY.md for the catalogue and the track record.
"""
