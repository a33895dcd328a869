"""Sub-commands of the ``calmon`` CLI.

Each module exposes ``configure(parser)`` to declare its options and ``run(args) -> int``.
Modules import heavy dependencies inside ``run`` so that ``calmon --help`` stays fast.
"""
