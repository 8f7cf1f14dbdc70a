"""Hugging Face directories in and out (issue 19 items 3 and 4).

In: save_pretrained leaves tied weights out (Qwen2, Gemma, GPT-2: lm_head.weight; T5:
encoder/decoder embed_tokens and lm_head, all shared.weight).  full-to-dcp of such a
directory must print one note naming the --tie options; with them added the DCP holds
exactly model.state_dict()'s keys and dcp.load fills a fresh model with the saved values;
with them no note.  Qwen2 is saved sharded (an index.json).

Out: dcp-to-full -o DIR --config-from HF_DIR gives a directory that
AutoModelForCausalLM/PreTrainedTokenizerFast.from_pretrained load at once, with equal weights.
"""
import os
import re
import shutil
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Report, run_fsdpconv  # noqa: E402

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

try:
    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
    from transformers import (AutoModelForCausalLM, GemmaConfig,  # noqa: E402
                              GemmaForCausalLM, GPT2Config, GPT2LMHeadModel,
                              PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, T5Config,
                              T5ForConditionalGeneration)
except ImportError as e:
    print("SKIP: transformers not installed (%s)" % e)
    sys.exit(77)


def models_to_test():
    return {
        "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(
            vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True)),
        "gemma": lambda: GemmaForCausalLM(GemmaConfig(
            vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, head_dim=8)),
        "gpt2": lambda: GPT2LMHeadModel(GPT2Config(
            vocab_size=64, n_positions=32, n_embd=16, n_layer=1, n_head=2)),
        "t5": lambda: T5ForConditionalGeneration(T5Config(
            vocab_size=64, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_decoder_layers=1,
            num_heads=2)),
    }


def dcp_keys(path):
    return set(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)


def load_into_fresh(make, path, want):
    """dcp.load into a freshly initialised model; [] when every tensor equals want's."""
    torch.manual_seed(99)
    fresh = make()
    sd = fresh.state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(sd, checkpoint_id=path)
    return ["%s differs after dcp.load" % k for k in want if not torch.equal(sd[k], want[k])]


def tie_case(rep, tmp, name, make):
    torch.manual_seed(1)
    model = make()
    want = {k: v.detach().clone() for k, v in model.state_dict().items()}
    src = os.path.join(tmp, name)
    # qwen2 sharded: the index.json path through the reader
    model.save_pretrained(src, safe_serialization=True,
                          **({"max_shard_size": "8KB"} if name == "qwen2" else {}))
    if name == "qwen2" and not os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        rep.case("%s: saved sharded" % name, ["no index.json"])
    out = os.path.join(tmp, name + ".dcp")
    rc, _, err = run_fsdpconv("full-to-dcp", "--world-size", "2", "-o", out, src)
    ties = re.findall(r"--tie (\S+)", err)
    notes = [ln for ln in err.splitlines() if "--tie" in ln]
    missing = sorted(set(want) - dcp_keys(out)) if rc == 0 else []
    probs = [err.strip()] if rc else []
    if len(notes) != 1:
        probs.append("want one note naming --tie, got %r" % err)
    if sorted(t.split("=")[0] for t in ties) != missing:
        probs.append("note names %s; the DCP lacks %s" % (ties, missing))
    if not missing:
        probs.append("save_pretrained kept every key: nothing to test")
    rep.case("%s: full-to-dcp notes the --tie to add (%s)" % (name, " ".join(ties)), probs)

    out2 = os.path.join(tmp, name + ".tied.dcp")
    args = []
    for t in ties:
        args += ["--tie", t]
    rc, _, err = run_fsdpconv("full-to-dcp", "--world-size", "2", *args, "-o", out2, src)
    probs = [err.strip()] if rc else []
    if rc == 0:
        if "--tie" in err:
            probs.append("note again with the --tie given: %r" % err)
        if dcp_keys(out2) != set(want):
            probs.append("keys differ from state_dict: %s" % sorted(dcp_keys(out2) ^ set(want)))
        else:
            probs += load_into_fresh(make, out2, want)
    rep.case("%s: with the note's --tie, dcp.load fills the model" % name, probs)
    return src, out2, want


def write_tokenizer(d):
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]")
    tok.save_pretrained(d)


def config_from_case(rep, tmp, src, dcp_dir, want):
    write_tokenizer(src)
    out = os.path.join(tmp, "qwen2.export")
    rc, _, err = run_fsdpconv("dcp-to-full", "-o", out, "--config-from", src, dcp_dir)
    probs = [err.strip()] if rc else []
    if rc == 0:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = AutoModelForCausalLM.from_pretrained(out)
            # The tokenizer's own class: transformers 5's AutoTokenizer picks Qwen2Tokenizer
            # from config.json's model_type over the files' tokenizer_class.
            tok = PreTrainedTokenizerFast.from_pretrained(out)
        got = m.state_dict()
        probs += ["%s differs" % k for k in want if not torch.equal(got[k], want[k])]
        if tok("hello world")["input_ids"] != [1, 2]:
            probs.append("tokenizer: %r" % tok("hello world"))
        for f in ("config.json", "generation_config.json", "tokenizer.json",
                  "tokenizer_config.json", "special_tokens_map.json"):
            if os.path.exists(os.path.join(src, f)) != os.path.exists(os.path.join(out, f)):
                probs.append("%s not copied" % f)
    rep.case("qwen2: dcp-to-full --config-from -> from_pretrained, equal weights", probs)


def main():
    rep = Report("test_hf_dirs")
    tmp = tempfile.mkdtemp(prefix="hf_dirs_")
    try:
        saved = {}
        for name, make in models_to_test().items():
            saved[name] = tie_case(rep, tmp, name, make)
        config_from_case(rep, tmp, *saved["qwen2"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rep.finish()


if __name__ == "__main__":
    common.fsdpconv_path()
    sys.exit(main())
