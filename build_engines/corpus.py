"""Deterministic training text for the tokenizer, made from a seed and nothing else.

Nothing is downloaded, and nothing is read from the repository either: if the corpus included
README.md or docs/, editing a doc would change the tokenizer, and two servers built from
different commits would disagree on token ids (a resumed reply or a prefix-cache key would then
mean different text on each). The text mixes English-like sentences from a built-in word list,
made-up names, numbers, dates, code, chat markup and non-ASCII scripts and emoji, so byte-level
BPE learns multi-byte merges and reaches a vocabulary of a few thousand tokens.
"""

from __future__ import annotations

import random
from collections.abc import Callable

_WORDS = """
the a an of to and in is it you that he she was for on are with as his her they be at one have
this from or had by word but what some we can out other were all there when up use your how
said each which do their time if will way about many then them write would like so these long
make thing see him two has look more day could go come did number sound no most people my over
know water than call first who may down side been now find any new work part take get place
made live where after back little only round man year came show every good me give our under
name very through just form sentence great think say help low line differ turn cause much mean
before move right boy old too same tell does set three want air well also play small end put
home read hand port large spell add even land here must big high such follow act why ask men
change went light kind off need house picture try us again animal point mother world near
build self earth father head stand own page should country found answer school grow study
still learn plant cover food sun four between state keep eye never last let thought city tree
cross farm hard start might story saw far sea draw left late run while press close night real
life few north open seem together next white children begin got walk example ease paper group
always music those both mark often letter until mile river car feet care second book carry
took science eat room friend began idea fish mountain stop once base hear horse cut sure watch
color face wood main enough plain girl usual young ready above ever red list though feel talk
bird soon body dog family direct pose leave song measure door product black short numeral class
wind question happen complete ship area half rock order fire south problem piece told knew pass
since top whole king space heard best hour better true during hundred five remember step early
hold west ground interest reach fast verb sing listen six table travel less morning ten simple
several vowel toward war lay against pattern slow center love person money serve appear road map
""".split()  # noqa: SIM905 (a block of words reads better than a 400-item literal)

_TECH_WORDS = """
server request token model stream reply prompt cache block batch queue deadline team usage
latency throughput memory gateway router engine scheduler prefill decode chunk prefix quota
share lease failover resume drain replica pool fleet metric dashboard deploy config tensor
kernel shard weight layer attention embedding vocabulary sampling temperature nucleus seed
""".split()  # noqa: SIM905 (a block of words reads better than a 400-item literal)

_FOREIGN = """
café naïve über Größe façade señor São Paulo Zürich crème brûlée jalapeño piñata déjà vu
Ångström smörgåsbord garçon Ελληνικά Привет мир спасибо 中文 你好 世界 日本語 こんにちは
ありがとう 한국어 안녕하세요 العربية مرحبا हिन्दी नमस्ते ♥ € £ ¥ ° ± × ÷ — … « » “ ” ‘ ’
🚀 🙂 ✨ 👍🏽 🎉 🔥 ✅ ❤️ 🤖 📦
""".split()  # noqa: SIM905 (a block of words reads better than a 400-item literal)

_SYLLABLES = (
    "ka",
    "ri",
    "to",
    "mi",
    "sa",
    "ne",
    "lo",
    "ven",
    "dor",
    "tha",
    "qui",
    "zel",
    "mar",
    "fen",
    "os",
    "ul",
)

_CODE = [
    "def {a}({b}):\n    return {b} + {n}\n",
    "for {a} in range({n}):\n    print({a}, {b})\n",
    '{{"id": {n}, "name": "{a}", "ok": true}}',
    "if ({a} >= {n}) {{ {b} = {a} * 2; }}",
    "SELECT {a}, {b} FROM t WHERE id = {n};",
    "$ switchyard {a} --{b}={n}",
]

_CHAT = [
    "<s>[INST] {q} [/INST] {r} </s>",
    "<s>[INST] <<SYS>>\n{r}\n<</SYS>>\n\n{q} [/INST]",
]


def generate_corpus(seed: int, num_lines: int) -> list[str]:
    """`num_lines` lines of mixed text; the same (seed, num_lines) always gives the same lines."""
    rng = random.Random(seed)
    makers: list[Callable[[random.Random], str]] = [
        _sentence,
        _sentence,
        _sentence,
        _sentence,
        _numbers_line,
        _code_line,
        _chat_line,
        _foreign_line,
    ]
    return [rng.choice(makers)(rng) for _ in range(num_lines)]


def _word(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.80:
        return rng.choice(_WORDS)
    if roll < 0.90:
        return rng.choice(_TECH_WORDS)
    if roll < 0.95:
        return rng.choice(_FOREIGN)
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))).capitalize()


def _sentence(rng: random.Random) -> str:
    words = [_word(rng) for _ in range(rng.randint(4, 18))]
    words[0] = words[0].capitalize()
    if rng.random() < 0.3:
        words.insert(rng.randint(1, len(words) - 1), rng.choice([",", ";", ":", " -"]))
    text = " ".join(words).replace(" ,", ",").replace(" ;", ";").replace(" :", ":")
    if rng.random() < 0.15:
        text = f'"{text}"' if rng.random() < 0.5 else f"({text})"
    return text + rng.choice([".", ".", ".", "!", "?", "..."])


def _numbers_line(rng: random.Random) -> str:
    forms = [
        lambda: str(rng.randint(0, 100_000)),
        lambda: f"{rng.uniform(0, 1000):.{rng.randint(1, 3)}f}",
        lambda: f"{rng.randint(1990, 2030)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        lambda: f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}",
        lambda: f"{rng.randint(0, 100)}%",
        lambda: f"${rng.randint(1, 999)}.{rng.randint(0, 99):02d}",
        lambda: f"+1 ({rng.randint(200, 999)}) {rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
    ]
    parts = [rng.choice(forms)() if rng.random() < 0.5 else rng.choice(_WORDS) for _ in range(rng.randint(3, 9))]
    return " ".join(parts) + "."


def _code_line(rng: random.Random) -> str:
    names = [rng.choice(_TECH_WORDS) for _ in range(2)]
    return rng.choice(_CODE).format(a=names[0], b=names[1], n=rng.randint(0, 512))


def _chat_line(rng: random.Random) -> str:
    return rng.choice(_CHAT).format(q=_sentence(rng), r=_sentence(rng))


def _foreign_line(rng: random.Random) -> str:
    return " ".join(rng.choice(_FOREIGN) for _ in range(rng.randint(3, 10)))
