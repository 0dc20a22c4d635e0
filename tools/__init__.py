"""The checkout's build tools, run by ``make`` (``make faces``): code
generators that write modules of the shipped packages. Not installed: the
wheel holds the packages they write, never these."""
