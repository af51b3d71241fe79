"""The model zoo: `tiny` builds in seconds, loads in transformers and in our own runner alike."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

from real_backend.model import SeqStep, load_checkpoint  # noqa: E402
from real_backend.zoo import SPECS, ModelShape, TrainSpec, build, resolve_zoo_model  # noqa: E402
from real_backend.zoo import train as T  # noqa: E402
from real_backend.zoo.cli import main as zoo_main  # noqa: E402
from real_backend.zoo.corpus import build_corpus  # noqa: E402
from real_backend.zoo.tokenizer import save_tokenizer, train_tokenizer  # noqa: E402
from workbench.errors import WorkbenchError  # noqa: E402

TINY = SPECS["tiny"]
FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    cache = tmp_path_factory.mktemp("zoo")
    build("tiny", cache_dir=cache)
    return cache


@pytest.fixture(scope="module")
def card(zoo):
    return json.loads((zoo / "tiny" / "card.json").read_text())


@pytest.fixture(scope="module")
def heldout_ids(zoo):
    tok = transformers.AutoTokenizer.from_pretrained(zoo / "tiny" / "target")
    corpus = build_corpus(TINY.train_bytes, TINY.heldout_bytes)
    return tok(corpus.heldout[0][:400], add_special_tokens=False)["input_ids"][:48]


def test_layout(zoo):
    root = zoo / "tiny"
    assert (root / "MODEL_CARD.md").is_file()
    for role in ("target", "draft"):
        assert resolve_zoo_model("tiny", role, cache_dir=zoo) == root / role
        for name in (*FILES, "special_tokens_map.json"):
            assert (root / role / name).is_file(), (role, name)
    assert not (zoo / "tiny.partial").exists()


@pytest.mark.parametrize("role", ["target", "draft"])
def test_transformers_and_own_runner_agree(zoo, heldout_ids, role):
    folder = resolve_zoo_model("tiny", role, cache_dir=zoo)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        want = hf(input_ids=torch.tensor([heldout_ids])).logits[0]
    ours = load_checkpoint(folder)
    cache = ours.new_cache(num_blocks=8, block_size=16)
    (got,) = ours.step(cache, [SeqStep("s", heldout_ids)])
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_tokenizer_round_trip(zoo):
    tok = transformers.AutoTokenizer.from_pretrained(zoo / "tiny" / "draft")
    assert isinstance(tok, transformers.PreTrainedTokenizerFast)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|bos|>", "<|eos|>", "<|pad|>")
    assert len(tok) == TINY.vocab_size
    text = 'def f(x):\n    """Doc ü."""\n\treturn {x: [1, 2]}  # ok\n'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode())  # BPE merged something


def test_card(zoo, card):
    assert card["name"] == "tiny" and card["python_version"]
    assert len(card["corpus"]["digest"]) == 64
    assert card["corpus"]["train_files"] > 0 and card["corpus"]["heldout_files"] > 0
    uniform = math.log(TINY.vocab_size)
    assert card["uniform_loss"] == pytest.approx(uniform, abs=1e-3)
    for role in ("target", "draft"):
        r = card[role]
        assert r["parameters"] > 0 and r["training_tokens"] > 0
        assert r["heldout_loss"] < uniform - 1.0, (role, r["heldout_loss"])
        assert r["heldout_perplexity"] == pytest.approx(math.exp(r["heldout_loss"]), rel=1e-3)
    assert card["target"]["parameters"] > 3 * card["draft"]["parameters"]
    assert card["target"]["heldout_loss"] < card["draft"]["heldout_loss"]
    assert 0.0 < card["greedy_agreement"] <= 1.0
    g = card["greedy_drafting"]
    assert g["k"] == 4 and 0.0 <= g["mean_accepted"] <= 4.0
    assert card["build_seconds"] > 0
    md = (zoo / "tiny" / "MODEL_CARD.md").read_text()
    assert card["corpus"]["digest"] in md and card["python_version"] in md


def test_second_build_reuses(zoo):
    root = zoo / "tiny"
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    assert build("tiny", cache_dir=zoo) == root  # no file rewritten: nothing was retrained
    assert {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()} == before


def test_stale_card_is_not_reused(zoo, tmp_path):
    import shutil

    copy = tmp_path / "tiny"
    shutil.copytree(zoo / "tiny", copy)
    card = json.loads((copy / "card.json").read_text())
    card["spec"]["seed"] += 1  # as if built by an older spec
    (copy / "card.json").write_text(json.dumps(card))
    with pytest.raises(WorkbenchError, match="workbench zoo build tiny --cache-dir"):
        resolve_zoo_model("tiny", cache_dir=tmp_path)


def test_corpus_and_tokenizer_deterministic(zoo, tmp_path):
    a = build_corpus(TINY.train_bytes, TINY.heldout_bytes)
    b = build_corpus(TINY.train_bytes, TINY.heldout_bytes)
    assert a == b
    assert not set(a.train_files) & set(a.heldout_files)
    assert all(not f.startswith(("test/", "idlelib/", "site-packages/")) for f in a.train_files)
    assert a.train_bytes <= TINY.train_bytes and a.heldout_bytes <= TINY.heldout_bytes
    save_tokenizer(train_tokenizer(b.train, TINY.vocab_size), tmp_path, model_max_length=2048)
    for role in ("target", "draft"):
        built = zoo / "tiny" / role / "tokenizer.json"
        assert built.read_bytes() == (tmp_path / "tokenizer.json").read_bytes()


def test_training_deterministic():
    """Same seed, same data: bit-identical weights (init and batch order are seeded)."""
    blocks = torch.randint(0, 64, (12, 17), generator=torch.Generator().manual_seed(0))
    shape = ModelShape(16, 32, 1, 2, 1)
    spec = TrainSpec(steps=4, batch_size=4, lr=1e-2, warmup_steps=1)
    states = []
    for _ in range(2):
        model = T.new_model(T.make_config(shape, 64, 64), seed=7)
        T.train_model(model, blocks, spec, seed=8)
        states.append(model.state_dict())
    for name, tensor in states[0].items():
        assert torch.equal(tensor, states[1][name]), name
    assert T.lr_at(0, spec) == pytest.approx(spec.lr)
    assert T.lr_at(spec.steps, spec) == pytest.approx(spec.lr * spec.min_lr_ratio)


def test_new_model_leaves_the_global_generator_alone():
    """Weights from the seed alone, as when it seeded the global generator (the zoo's cached
    builds stay valid), and the caller's next global draw is what it would have been."""
    config = T.make_config(ModelShape(16, 32, 1, 2, 1), 64, 64)
    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    torch.manual_seed(123)
    model = T.new_model(config, seed=7)
    assert torch.equal(torch.rand(3), expected_draw)
    torch.manual_seed(7)
    seeded_globally = T.LlamaForCausalLM(config).float()
    for name, tensor in seeded_globally.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name


def test_unbuilt_model_names_the_command(tmp_path):
    with pytest.raises(WorkbenchError, match="workbench zoo build small"):
        resolve_zoo_model("small", cache_dir=tmp_path)
    with pytest.raises(WorkbenchError, match="unknown zoo model"):
        resolve_zoo_model("nope", cache_dir=tmp_path)
    with pytest.raises(WorkbenchError, match="role"):
        resolve_zoo_model("tiny", "oracle", cache_dir=tmp_path)


def test_cli_list_and_build(zoo, capsys):
    assert zoo_main(["list", "--cache-dir", str(zoo)]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "agreement" in out and "small" in out and "not built" in out
    assert zoo_main(["build", "tiny", "--cache-dir", str(zoo)]) == 0
    assert "reused" in capsys.readouterr().out


@pytest.mark.parametrize("card", ["{damaged", "[1, 2]"])
def test_an_unreadable_card_is_no_card(tmp_path, capsys, card: str):
    """A card that cannot be read counts as not built (a build writes it again)."""
    folder = tmp_path / "tiny"
    for role in ("target", "draft"):
        (folder / role).mkdir(parents=True)
        (folder / role / "config.json").write_text("{}")
    (folder / "card.json").write_text(card)
    assert zoo_main(["list", "--cache-dir", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    tiny = next(i for i, line in enumerate(lines) if line.startswith("tiny "))
    assert lines[tiny + 1].strip() == "not built"
    with pytest.raises(WorkbenchError, match="is not built"):
        resolve_zoo_model("tiny", cache_dir=tmp_path)


def test_a_file_as_the_zoo_folder(tmp_path, capsys):
    taken = tmp_path / "zoo.txt"
    taken.write_text("mine")
    assert zoo_main(["list", "--cache-dir", str(taken)]) == 2
    assert "--cache-dir: a file, not a folder" in capsys.readouterr().err
