"""Training: losses (this package's other modules -- schedules, optimizer, trainer, checkpoints -- are
imported from their own modules, ``from normlab.train.losses import ...``)."""
