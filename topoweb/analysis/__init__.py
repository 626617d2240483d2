"""What topoweb computes from a topology class, kept as Analysis rows and filled by Celery tasks."""
