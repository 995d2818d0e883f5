#!/usr/bin/env python3
"""make_corpus.py - a deterministic, hard corpus for the tokenizer's reference test and benchmark.

    make_corpus.py [--seed N] [--texts N] [--pairs N] [--codepoints] > corpus.jsonl

Writes JSON lines {"text": ...} and {"text": ..., "pair": ...}. The same seed gives the same
file on every machine (Python's random.Random is specified to be reproducible for a seed).

What it holds, mixed within and across texts:
  - prose-like text (frequent English words, capitals, digits, ordinary punctuation): what a
    service mostly sees, and most of what the benchmark measures;
  - accents: precomposed Latin letters and base letters followed by runs of combining marks in
    random (non-canonical) order, which NFD reorders before accent stripping;
  - CJK ideographs from every range BERT isolates, and the neighbouring ranges it does not
    (kana, hangul, the gap at U+2B820..U+2B91F between its fifth and sixth ranges);
  - other scripts: Greek, Cyrillic, Armenian, Hebrew, Arabic, Devanagari, Thai, Georgian, Ethiopic;
  - emoji: single, with skin tones, ZWJ family sequences, flags, keycaps, variation selectors;
  - every kind of control and format character, NUL, U+FFFD, private use, noncharacters;
  - every Unicode whitespace character, and look-alikes that are not whitespace (U+180E, U+200B);
  - punctuation runs (ASCII and Unicode), symbols (math, currency, arrows, box drawing);
  - special casing: İ, ı, ß, ẞ, Σ at word ends, ǅ, ﬁ, Kelvin sign, Ångström sign, fullwidth;
  - the added tokens written into texts ("[CLS]", "x[MASK]y", "[mask]", "[[SEP]]");
  - words longer than max_input_chars_per_word (100), and exactly 100 and 101 characters;
  - empty texts, texts of only whitespace or only control characters;
  - pairs drawn from all of the above, some long enough to need truncation.
With --prose it writes English-like prose only (the benchmark's second corpus: what most
services see). With --codepoints it adds lines that put every code point U+0000..U+10FFFF (but the surrogates)
between two letters, "a<c>b", 64 to a line: every character's class (removed, whitespace,
punctuation, Chinese, mark, decomposition, lowercase) shows in the ids.
"""

import argparse
import json
import random
import sys

COMMON_WORDS = (
    "the of and to in is was for that with as on by at from his her it an were are which this "
    "be or has had not but what all when we there can been one who would their if she more said "
    "time new first about after year also two people other into most may over up world only "
    "state city university three made film such some many government national these during "
    "school where later team before than since between under known american united used "
    "embedding model server request batch token sentence search retrieval vector similarity "
    "inference latency throughput queue encoder transformer attention layer hidden weights "
    "unbelievable internationalization tokenization preprocessing antidisestablishmentarianism"
).split()

WHITESPACE = [
    "\t", "\n", "\x0b", "\x0c", "\r", " ", "\x85", "\xa0", "\u1680", "\u2000", "\u2001",
    "\u2002", "\u2003", "\u2004", "\u2005", "\u2006", "\u2007", "\u2008", "\u2009", "\u200a",
    "\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
    # not White_Space, but often mistaken for it
    "\x1c", "\x1d", "\x1e", "\x1f", "\u180e", "\u200b", "\u2060", "\ufeff",
]
CONTROLS = (
    [chr(c) for c in range(0x00, 0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xA0)] +
    ["\xad", "\u061c", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202e", "\u2066",
     "\u2069", "\ufff9", "\ufffb", "\ufffd", "\U000e0001", "\U000e0041", "\ue000", "\uf8ff",
     "\U000f0000", "\U0010fffd", "\ufffe", "\uffff", "\U0010ffff", "\U0001fffe"]
)
PUNCTUATION = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + list(
    "¡¿«»‐‑‒–—―‖‗‘’‚‛“”„‟†‡•‣․‥…‧‰‱′″‴‵‹›※‼‽⁂⁇⁈⁉、。〃〈〉《》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟"
    "・﹏！＂＃％＆＇（）＊，－．／：；？＠［＼］＿｛｝｡｢｣､･־׀׃׆׳״؉؊،؍؛؞؟٪٫٬٭۔।॥॰෴๏๚๛"
    "༄༅༆༇༈༉༊་༌།༎༏༐༑༒༔၊။၌၍၎၏჻፠፡።፣፤፥፦፧፨᙭᙮᛫᛬᛭᜵᜶។៕៖៘៙៚᠀᠁᠂᠃᠄᠅᠆᠇᠈᠉᠊"
    "⸀⸁⸂⸃⸄⸅⸆⸇⸈⸉⸊⸋⸌⸍⸎⸏⸐⸑⸒⸓⸔⸕⸖⸗⸘⸙⸚⸛⸜⸝⸞⸟⸠⸡⸢⸣⸤⸥⸦⸧⸨⸩⸪⸫⸬⸭⸮ⸯ⸰⸱⸲⸳⸴⸵⸶⸷⸸⸹⸺⸻⸼⸽⸾⸿⹀⹁⹂⹃⹄⹅"
    "\U000111c9\u166d"
)
SYMBOLS = list(
    "$¢£¤¥€₹₽₿©®™°±×÷∀∂∃∅∇∈∉∑∏√∞∧∨∩∪∫≈≠≡≤≥⊂⊃⊆⊇⊕⊗←↑→↓↔⇐⇒⇔─│┌┐└┘├┤┬┴┼═║╔╗╚╝"
    "■□▲△▼▽◆◇○●★☆☀☁☂☃☎☑☘☠☢☣☮☯♀♂♠♣♥♦♩♪♫♬✓✔✗✘❤➡⌘⌥⏎^`¨¯´¸˘˙˚˛˜˝"
)
COMBINING = [chr(c) for c in range(0x300, 0x370)] + [
    "\u0483", "\u0591", "\u05b0", "\u064b", "\u0670", "\u093c", "\u094d", "\u0e31", "\u0e48",
    "\u1ab0", "\u1dc0", "\u20d0", "\u20dd", "\u20e3", "\u302a", "\u302e", "\u3099", "\ufe20",
    "\U0001d165", "\U0001d16d", "\U0001d167", "\U0001e8d0", "\u0903", "\u0488",
]
LATIN_PRECOMPOSED = [chr(c) for c in list(range(0xC0, 0x250)) + list(range(0x1E00, 0x1F00))
                     if c not in (0xD7, 0xF7)]
SPECIAL_CASING = list("İıßẞΣσςǅǄǆǈǋǲﬀﬁﬂﬃﬄﬅﬆŉǰΐΰևẖẗẘẙẚὐᾈᾼῌῼKÅΩⅫⅻⓐⒶＡＺａｚĲĳſ")
SCRIPTS = [
    (0x391, 0x3C9), (0x410, 0x44F), (0x531, 0x556), (0x561, 0x587), (0x5D0, 0x5EA),
    (0x620, 0x64A), (0x905, 0x939), (0xE01, 0xE2E), (0x10D0, 0x10FA), (0x1200, 0x1248),
    (0x3041, 0x3096), (0x30A1, 0x30FA), (0xAC00, 0xD7A3), (0x13A0, 0x13F4), (0x1100, 0x1112),
]
CJK = [
    (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F), (0x2B820, 0x2B91F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F), (0x2E80, 0x2EFF), (0x3190, 0x31FF), (0x30000, 0x3134F),
]
EMOJI = [
    "😀", "😂", "🥰", "🫠", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇳", "1️⃣", "#️⃣", "❤️", "❤︎",
    "☺️", "🧑🏿‍🤝‍🧑🏻", "🐈‍⬛", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "🤷‍♀️", "💯", "🙏", "🚀", "🔥",
]
ADDED = ["[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]", "[mask]", "[CLS", "[[SEP]]", "x[MASK]y",
         "[SEP][SEP]", "[ CLS ]", "[MASK]s"]
HAND_PICKED = [
    "", " ", "\t\n\r", "\x00", "\x00\x01\x02", "\ufffd", "   leading and trailing   ",
    "Hello, world!", "HELLO WORLD", "hello...world???", "e.g. U.S.A.", "don't won't y'all",
    "İstanbul", "ISTANBUL istanbul İSTANBUL", "Straße STRASSE straẞe", "ΣΊΣΥΦΟΣ Σίσυφος ΌΣΟΣ",
    "ὈΔΥΣΣΕΎΣ", "ǅemal ǄEMAL", "ﬁnance ﬂow", "K Å Ω", "Ⅻ ⅻ", "ＦＵＬＬＷＩＤＴＨ ｆｕｌｌ",
    "café cafe\u0301 CAFÉ CAFE\u0301", "a\u0301\u0316\u0300b", "a\u0316\u0301b", "q\u0307\u0323",
    "naïve coöperate résumé Ångström", "Ḍ̇ ḍ̇ D\u0307\u0323 D\u0323\u0307", "\u1100\u1161\u11a8 각",
    "中文字符测试", "日本語のテキストです。", "한국어 텍스트", "\U00020000\U0002a6df\U0002b820\U0002b920",
    "\uf900\ufa6a\U0002f800", "ⅠⅡⅢ", "x" * 100, "x" * 101, "é" * 100, "é" * 101,
    "\u4e00" * 150, "ab" * 300, "un" + "believable" * 20,
    "[CLS] [SEP] [MASK] [PAD] [UNK]", "[CLS][SEP]", "x[MASK]y", "[mask] [Mask]", "[[SEP]]",
    "👨‍👩‍👧‍👦 family", "🏳️‍🌈🇯🇵", "a\u200db", "a\u00adb", "a\ufeffb", "a\u180eb", "a\u200bb",
    "tab\tnewline\nnbsp\xa0ideographic\u3000end", "1,234,567.89 $5 €10 ¥100 50%",
    "C++ C# F# .NET node.js", "https://example.com/a/b?c=d&e=f#g", "foo@example.com",
    "<html><body>hi</body></html>", "#hashtag @mention", "😀😀😀", "!!!???...---",
    "\u0130\u0307", "I\u0307", "\U00010400\U00010428", "\u13a0\u13a1 \uab70", "\u1e9e\u00df",
    "\u2126\u212a\u212b", "\u03d0\u03d1\u03d5\u03f0\u03f1\u03f5", "\u0345\u0391\u0345",
    "\u1f88\u1f80", "\U0001d400\U0001d41a", "\u2460\u24b6\u24d0", "\ufb00\ufb06\ufb13",
    "\u0587", "\u1c80\u1c88", "\ua7c0\ua7c1 \ua7cb\ua7cc\ua7cd", "\u2c2f\u2c5f",
]


# --extra (the general pipeline's test): more scripts as sentences, whitespace and line-break
# runs, control characters, very long texts, and the added tokens of the byte-level BPE,
# SentencePiece and chat tokenizers at text edges, inside words and next to spaces.
EXTRA_ADDED = ["<s>", "</s>", "<pad>", "<unk>", "<mask>", "<|endoftext|>", "<|im_start|>",
               "<|im_end|>", "[CLS]", "[SEP]", "[MASK]", "hello world", "Hello World", "<0x41>",
               "\u2581", "\u2581\u2581"]
EXTRA_HAND_PICKED = [
    "ภาษาไทยเป็นภาษาที่ไม่มีการเว้นวรรคระหว่างคำ", "العربية لغة جميلة، أليس كذلك؟ ١٢٣",
    "हिन्दी भाषा में लिखा गया वाक्य। क्षत्रिय", "👩‍👩‍👧‍👦👩🏽‍🚀🧑‍🧑‍🧒 🇺🇸🇫🇷🇩🇪🇯🇵🇧🇷",
    "a\xa0b\u3000c\u2009d\u202fe", "line one\r\nline two\r\n\r\nline four\n\n\n",
    "  two  spaces   three    four     ", "\t\ttabs\t\tand\x0bvt\x0cff\x85nel",
    "\x01\x02\x03ctrl\x7f\x80\x9f", "x" * 10000, "word " * 2000, "\u00e9" * 3000,
    "ab" * 5000, "1234567890" * 50, "The year 2026, the 3rd of May: 12:30 pm.",
    "def f(x):\n    return x**2  # comment\n", "SELECT * FROM t WHERE a='b';",
    "don't I'M he's we'LL THEY'RE it'S", "\u2581already\u2581metaspaced \u2581 \u2581\u2581",
    "<0x41><0xFF> <0x00>", "ﬁ ﬃ ① ㈱ ㍿ ﾊﾝｶｸ ＡＢＣ", "Å Å Å", "ǅ ǈ ǋ",
]
EXTRA_ADDED_TEXTS = [
    "{t}", "{t}{t}", " {t} ", "x{t}y", "x {t} y", "x  {t}  y", "{t}hello", "hello{t}",
    "\u3000{t}\n", "{t}\u00a0x", "hello {t}world {t}", "HELLO {t}", "a{t}b{t}c",
]


def extra_texts(rng):
    out = list(EXTRA_HAND_PICKED)
    for token in EXTRA_ADDED:
        for pattern in EXTRA_ADDED_TEXTS:
            out.append(pattern.format(t=token))
    # Long mixed texts (about 10,000 characters).
    for _ in range(6):
        parts = []
        while sum(len(p) for p in parts) < 10000:
            parts.append(word(rng))
            parts.append(separator(rng))
        out.append("".join(parts))
    return out


def rand_range(rng, ranges):
    lo, hi = rng.choice(ranges)
    return chr(rng.randint(lo, hi))


def word(rng, prose=False):
    kind = rng.random()
    if prose:  # English-like only: words, capitals, numbers, a little punctuation
        if kind < 0.9:
            w = rng.choice(COMMON_WORDS)
            return w.capitalize() if rng.random() < 0.1 else w
        if kind < 0.95:
            return str(rng.randint(0, 10 ** rng.randint(1, 5)))
        return rng.choice(COMMON_WORDS) + rng.choice(",.;:!?)'")
    if kind < 0.55:
        w = rng.choice(COMMON_WORDS)
        r = rng.random()
        if r < 0.1:
            w = w.capitalize()
        elif r < 0.13:
            w = w.upper()
        return w
    if kind < 0.62:
        return str(rng.randint(0, 10 ** rng.randint(1, 7)))
    if kind < 0.68:
        base = "".join(rng.choice("aeiouncstrlAEIOU") for _ in range(rng.randint(1, 6)))
        out = []
        for ch in base:
            out.append(ch)
            out.extend(rng.choice(COMBINING) for _ in range(rng.choice([0, 0, 1, 2, 3])))
        return "".join(out)
    if kind < 0.72:
        return "".join(rng.choice(LATIN_PRECOMPOSED) for _ in range(rng.randint(1, 8)))
    if kind < 0.77:
        return "".join(rand_range(rng, CJK) for _ in range(rng.randint(1, 6)))
    if kind < 0.82:
        return "".join(rand_range(rng, SCRIPTS) for _ in range(rng.randint(1, 9)))
    if kind < 0.85:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if kind < 0.88:
        return "".join(rng.choice(PUNCTUATION) for _ in range(rng.randint(1, 6)))
    if kind < 0.90:
        return "".join(rng.choice(SYMBOLS) for _ in range(rng.randint(1, 4)))
    if kind < 0.92:
        return "".join(rng.choice(SPECIAL_CASING) for _ in range(rng.randint(1, 5)))
    if kind < 0.935:
        return rng.choice(ADDED)
    if kind < 0.95:
        return rng.choice(CONTROLS)
    if kind < 0.96:  # long words around max_input_chars_per_word
        n = rng.choice([99, 100, 101, 150, 400])
        alphabet = rng.choice(["abcdefghij", "éàüñ", "ab\u0301", "\u0430\u0431\u0432"])
        return "".join(rng.choice(alphabet) for _ in range(n))
    if kind < 0.98:  # any code point at all (assigned or not), but no surrogates
        cp = rng.randint(0, 0x10FFFF)
        while 0xD800 <= cp <= 0xDFFF:
            cp = rng.randint(0, 0x10FFFF)
        return rng.choice(COMMON_WORDS) + chr(cp)
    return rng.choice(COMMON_WORDS) + rng.choice(PUNCTUATION) + rng.choice(COMMON_WORDS)


def separator(rng):
    r = rng.random()
    if r < 0.85:
        return " "
    if r < 0.95:
        return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 3)))
    return ""


def text(rng, prose=False):
    r = rng.random()
    if prose:
        n = rng.choice([5, 8, 12, 20, 30, 45, 60, 90, 140])
        return " ".join(word(rng, prose=True) for _ in range(n)) + "."
    if r < 0.02:
        return ""
    if r < 0.03:
        return "".join(rng.choice(WHITESPACE + CONTROLS) for _ in range(rng.randint(1, 8)))
    n = rng.choice([1, 2, 3, 5, 8, 12, 20, 30, 45, 60, 90, 140, 260])
    parts = []
    for _ in range(n):
        parts.append(word(rng))
        parts.append(separator(rng))
    if rng.random() < 0.5:
        parts.append(rng.choice(".!?"))
    return "".join(parts)


def codepoint_lines():
    line = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        line.append("a" + chr(cp) + "b")
        if len(line) == 64:
            yield " ".join(line)
            line = []
    if line:
        yield " ".join(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20)
    parser.add_argument("--texts", type=int, default=4000)
    parser.add_argument("--pairs", type=int, default=1500)
    parser.add_argument("--codepoints", action="store_true")
    parser.add_argument("--no-hand-picked", action="store_true")
    parser.add_argument("--extra", action="store_true",
                        help="add the general pipeline's hard cases (see EXTRA_HAND_PICKED)")
    parser.add_argument("--prose", action="store_true",
                        help="English-like prose only (the benchmark's second corpus)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    out = sys.stdout
    singles = [] if args.no_hand_picked or args.prose else list(HAND_PICKED)
    singles += [text(rng, args.prose) for _ in range(args.texts)]
    if args.extra:
        singles += extra_texts(random.Random(args.seed + 1))
    for t in singles:
        out.write(json.dumps({"text": t}) + "\n")
    pool = singles + ([] if args.prose else HAND_PICKED)
    for _ in range(args.pairs):
        out.write(json.dumps({"text": rng.choice(pool), "pair": rng.choice(pool)}) + "\n")
    if args.codepoints:
        for t in codepoint_lines():
            out.write(json.dumps({"text": t}) + "\n")


if __name__ == "__main__":
    main()
