"""The protocol: what travels between a client and its daemon. The
messages (``_messages``: records, one class each), the rules apart from
them (``_proto``), frames and the fds they carry (``_frames``), the body
codec that reads the messages' annotations (``_codec``, with the JSON
forms in ``_body``), the records themselves (``_record``), and the two
system calls that carry frames (``_sockio``) with their trio driver
(``_wire``). Imports neither the daemon nor a
client. Modules import each other by full path: nothing is re-exported
here."""
