"""llama-cpp-python's ``Llama`` loaded as tokenstep loads: the test process's oracles and
the ``llama_cpp.server`` the OpenAI-backend tests start (:data:`SERVER_BOOT`)."""

from __future__ import annotations


def params_like_tokenstep() -> None:
    """llama-cpp-python's ``Llama`` (every oracle in these tests) takes no argument for
    ``use_extra_bufts`` and loads the model inside its constructor, so setting its
    ``model_params`` afterwards is too late. It builds them with
    ``llama_cpp.llama_cpp.llama_model_default_params()``: wrapped here, once per test process,
    so the oracle makes tokenstep's choice (off where this llama.cpp has the AMX kernels that
    crash on the first decode, llama.cpp's default elsewhere, so nothing changes there).
    tokenstep's own loads call ``llama_cpp.llama_model_default_params`` (the package's name,
    not this module attribute) and set the field themselves."""
    import llama_cpp.llama_cpp as low

    from tui.engine.model import repack
    from tui.engine.model.model import system_info

    if getattr(low.llama_model_default_params, "tokenstep_repack", False):
        return
    original = low.llama_model_default_params
    use_extra_bufts = repack.decide(system_info()).use_extra_bufts

    def default_params() -> low.llama_model_params:
        params = original()
        params.use_extra_bufts = use_extra_bufts
        return params

    default_params.tokenstep_repack = True  # type: ignore[attr-defined]
    low.llama_model_default_params = default_params  # type: ignore[assignment]


# ``python -c SERVER_BOOT ARGS``: llama-cpp-python's server with tokenstep's use_extra_bufts (on
# a Xeon with AMX its default extra buffers crash the first completion, llama.cpp #20824).
SERVER_BOOT = (
    "import runpy, sys; from tests.support.oracle_params import params_like_tokenstep; "
    "params_like_tokenstep(); sys.argv[0] = 'llama_cpp.server'; "
    "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)"
)
