"""Sessions on other hosts, reached through OpenSSH: the hosts file
(``_hosts``), the ssh transport and its typed failures (``_ssh``), the
one schema of what a host answers (``_listing``, pure and light: the
host's ``ls --json`` writes it), what a host's answers mean
(``_answers``, pure), and their part of the restore
(``_restore``, on trio, under the restore's one deadline). Its public
names are in ``restore``'s face."""
