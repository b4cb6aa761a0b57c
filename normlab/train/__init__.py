"""Training: schedules, optimizers, losses, checkpoints, data parallelism and the Trainer."""
