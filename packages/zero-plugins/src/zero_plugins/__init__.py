"""Plugin machinery shared by the zero-* packages (pluggy project and entry-point group `zero`)."""
from ._attention import DEFAULT_ATTENTION, AttentionKind
from ._categories import UNOWNED_CATEGORIES, Category
from ._commands import AddArguments, CommandTable, RunCommand, add_action_json_flag
from ._distribution import Provenance
from ._env import FALSE_SPELLINGS, TRUE_SPELLINGS, EnvVarError, env_flag
from ._errors import PluginError, ZeroError
from ._hooks import plain_hookimpls
from ._lazy import lazy_exports
from ._listing import PluginInfo, plugin_infos
from ._manager import (
    DISABLE_ENV,
    disabled_plugin_names,
    get_plugin_manager,
    reset_plugin_manager,
    use_hookspecs,
)
from ._markers import ENTRY_POINT_GROUP, PROJECT_NAME, hookimpl, hookspec
from ._versions import installed_zero_distributions
from ._registry import Checkable, NamedRegistry, Registration, Status
from ._swap_slice import POOL_SHARE, budget_slice_numel, swap_slice_numel
from ._output import CommandResult, format_table
from ._user_files import (
    MAX_CONFIG_BYTES,
    ConfigFileError,
    OutputPathError,
    check_output_path,
    check_writable_directory,
    json_integer,
    read_config_text,
)
from ._validation import validation_problem
from .__about__ import __version__

__all__ = [
    "AttentionKind",
    "Category",
    "DEFAULT_ATTENTION",
    "UNOWNED_CATEGORIES",
    "AddArguments",
    "ConfigFileError",
    "MAX_CONFIG_BYTES",
    "OutputPathError",
    "check_output_path",
    "check_writable_directory",
    "json_integer",
    "read_config_text",
    "CommandResult",
    "CommandTable",
    "add_action_json_flag",
    "DISABLE_ENV",
    "EnvVarError",
    "FALSE_SPELLINGS",
    "TRUE_SPELLINGS",
    "env_flag",
    "POOL_SHARE",
    "budget_slice_numel",
    "swap_slice_numel",
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
    "Checkable",
    "NamedRegistry",
    "PluginError",
    "PluginInfo",
    "Provenance",
    "Registration",
    "RunCommand",
    "Status",
    "ZeroError",
    "__version__",
    "disabled_plugin_names",
    "format_table",
    "get_plugin_manager",
    "hookimpl",
    "installed_zero_distributions",
    "hookspec",
    "lazy_exports",
    "plain_hookimpls",
    "plugin_infos",
    "reset_plugin_manager",
    "use_hookspecs",
    "validation_problem",
]
