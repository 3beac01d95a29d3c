"""Trainers: turn-level credit assignment, losses, the learner and the training loop."""
