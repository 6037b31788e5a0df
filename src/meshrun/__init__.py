"""meshrun: one unchanged command on every node.

``import meshrun`` is cheap and never imports torch; the launcher and the
worker-side helpers import it only when they run.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
