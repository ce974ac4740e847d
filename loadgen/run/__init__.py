"""Stage 4: when to send. The sweep, its points, the scheduler, loop health, the backend seam."""
