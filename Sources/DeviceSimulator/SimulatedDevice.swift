// Placeholder replaced by the simulator implementation.
