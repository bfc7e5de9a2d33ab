"""Issue 12: a saved session keeps the whole sampler chain and ``--resume`` restores it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.resume_files import write_resume
from tui.args import parse
from tui.engine import SamplerSettings
from tui.engine.sampler.sampler_settings import parse_sampling_seq
from tui.trace_cli import settings_from_args
from tui.worker.resume import apply_to_args, load_header


def test_resume_restores_every_chain_parameter(tmp_path: Path, model_path: Path) -> None:
    chain = SamplerSettings(
        temp=0.7, seed=99, repeat_penalty=1.2, frequency_penalty=0.1, presence_penalty=0.2,
        repeat_last_n=32, dry_multiplier=0.8, dry_sequence_breakers=["\n", "!"],
        top_n_sigma=1.5, typical_p=0.9, xtc_probability=0.3, xtc_threshold=0.2,
        dynatemp_range=0.3, dynatemp_exponent=1.5, mirostat=0, logit_bias=[(2, float("-inf"))],
        samplers=parse_sampling_seq("kyptmx"), grammar='root ::= "yes" | "no"', off=["xtc"],
    )
    path = write_resume(tmp_path / "s.jsonl", model_path)
    header = json.loads(path.read_text(encoding="utf-8"))
    header["settings"] = chain.to_dict()  # as session_store writes engine.settings.to_dict()
    path.write_text(json.dumps(header) + "\n", encoding="utf-8")
    args = parse(["--resume", str(path), "--top-k", "3", "--samplers", "top_k"])[1]
    apply_to_args(args, load_header(args.resume))
    assert settings_from_args(args).to_dict() == chain.to_dict()


def test_an_older_session_without_the_chain_gets_llama_cpps_defaults(
    tmp_path: Path, model_path: Path
) -> None:
    path = write_resume(tmp_path / "old.jsonl", model_path)
    args = parse(["--resume", str(path)])[1]
    apply_to_args(args, load_header(args.resume))
    s = settings_from_args(args)
    assert s.samplers == SamplerSettings().samplers and s.repeat_penalty == 1.0
    assert (s.temp, s.top_k, s.seed, s.greedy) == (0.0, 40, 1, True)
