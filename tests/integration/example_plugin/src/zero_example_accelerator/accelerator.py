from zero_core.accelerator.cpu import CpuAccelerator


class ExampleAccelerator(CpuAccelerator):
    """The host CPU under another name; never auto-detected, only chosen by DS_ACCELERATOR=example."""

    name = "example"
    detect_priority = -1
