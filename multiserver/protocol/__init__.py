"""The protocol: what travels between a client and its daemon. The
messages (``_messages``, and their generated plain twins
``_light_messages``), the rules apart from them (``_proto``), frames and
the fds they carry (``_frames``), the two body codecs (``_codec``,
``_light``, and what they share, ``_body``), the light records
(``_record``), and the two system calls that carry frames (``_sockio``)
with their trio driver (``_wire``). Imports neither the daemon nor a
client. Modules import each other by full path: nothing is re-exported
here."""
