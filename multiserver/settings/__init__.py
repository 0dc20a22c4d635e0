"""The settings: what a value may be (``_setting_kinds``), every
``MULTISERVER_*`` variable as one table and the daemon's command line
(``_settings``), the daemon's config (``_config``), and what a child
inherits (``_env``). Modules import each other by full path: nothing is
re-exported here."""
