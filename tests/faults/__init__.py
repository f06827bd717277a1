"""Seeded fault injection against a real 3-node quorum, with a history checker (issue 7).

``python -m tests.faults --seed S --duration D`` (``make faults SEED=S DURATION=D``) runs one seeded
schedule of faults; ``pytest tests/faults`` runs the checker's own tests, the durability edges and a short
fixed-seed subset. See RELIABILITY.md for the catalogue and what has been run.
"""
