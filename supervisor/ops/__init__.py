"""What operators touch: logs, health and metrics, systemd's notify protocol, Sentry, and the health
probe."""
