"""The daemon as a service of the user's login: what ``multiserver service
install`` writes (``_units``: systemd user units, launchd agents, the
profile lines where neither runs; pure) and the service manager that
loads them (``_managers``: systemctl or launchctl, the one seam between
the two). The command itself is ``commands/service.py``.
"""
