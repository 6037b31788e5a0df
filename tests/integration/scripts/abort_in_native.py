"""Dies by SIGABRT from inside a function, as a C++ ``std::terminate`` in torch or gloo would:
the worker shim's faulthandler writes the Python stack to stacks/rank<R>.txt."""

import os


def native_code_gives_up() -> None:
    print("about to abort", flush=True)
    os.abort()


native_code_gives_up()
