"""Entry-point module: no torch here, classes are imported inside the hooks."""
from zero_plugins import CommandResult, hookimpl


@hookimpl
def zero_register_accelerators(register):
    from .accelerator import ExampleAccelerator

    register("example", ExampleAccelerator)


@hookimpl
def zero_register_commands(cli):
    cli.add_command("example-hello", help="say hello from the example plugin", run=hello)


def hello(args):
    return CommandResult({"hello": "example"}, "hello from the example plugin")
