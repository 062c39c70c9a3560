"""Build the tiny hand-written SQuAD v1.1-format fixture used by the workshop.

Why: the course must run (and be tested) with no network access, so we cannot
download SQuAD from the Hugging Face Hub. This script holds a handful of short,
original encyclopedic paragraphs with questions, computes every ``answer_start``
with ``str.find`` (offsets are never typed by hand), validates the result, and
writes ``workshop/assets/squad_fixture/{train,dev}.json``. Re-running it
reproduces the files byte for byte.

Usage:  python scripts/build_fixture.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parents[1] / "workshop" / "assets" / "squad_fixture"

# Each article: (title, [(context, [(question, [answer, ...]), ...]), ...]).
# Every answer must occur verbatim in its context and be unambiguous: either it
# occurs exactly once (offset = str.find), or it is written as (text, anchor)
# with a unique longer anchor, or it is an alternative lying inside an earlier
# answer to the same question (see _locate). Train questions have one answer; dev
# questions may list 2-3 alternative spans, like the real SQuAD dev set.
Answer = str | tuple[str, str]
Article = tuple[str, list[tuple[str, list[tuple[str, list[Answer]]]]]]

TRAIN: list[Article] = [
    (
        "Photosynthesis",
        [
            (
                "Photosynthesis is the process by which green plants, algae and some bacteria "
                "turn light energy into chemical energy. It takes place mainly inside "
                "chloroplasts, small structures in leaf cells that contain the green pigment "
                "chlorophyll. During the light-dependent reactions, water molecules are split "
                "and oxygen is released as a by-product. The energy captured is then used in "
                "the Calvin cycle to fix carbon dioxide from the air into sugars such as "
                "glucose, which the plant uses for growth and as a store of energy.",
                [
                    ("In which cell structures does photosynthesis mainly take place?", ["chloroplasts"]),
                    ("What green pigment do chloroplasts contain?", ["chlorophyll"]),
                    ("What gas is released when water molecules are split?", ["oxygen"]),
                    ("In which cycle is carbon dioxide fixed into sugars?", ["the Calvin cycle"]),
                ],
            )
        ],
    ),
    (
        "Hadrian's_Wall",
        [
            (
                "Hadrian's Wall is a former defensive fortification in the north of England. "
                "Construction began in AD 122 on the orders of the Roman emperor Hadrian, and "
                "the wall eventually stretched about 117 kilometres from the banks of the "
                "River Tyne to the Solway Firth. Soldiers were stationed in forts and smaller "
                "milecastles placed along its length. Although much of the stone was later "
                "taken for other buildings, long sections survive, and the wall was named a "
                "World Heritage Site in 1987.",
                [
                    ("In what year did construction of Hadrian's Wall begin?", ["AD 122"]),
                    ("About how long was Hadrian's Wall?", ["117 kilometres"]),
                    ("Which river marked the eastern end of the wall?", ["River Tyne"]),
                    ("What were the small forts along the wall called?", ["milecastles"]),
                    ("When did the wall become a World Heritage Site?", ["1987"]),
                ],
            )
        ],
    ),
    (
        "Nile",
        [
            (
                "The Nile is a major river of northeastern Africa that flows north into the "
                "Mediterranean Sea. It is formed by two main branches: the White Nile, which "
                "rises in the Great Lakes region, and the Blue Nile, which begins at Lake Tana "
                "in Ethiopia. The two branches meet near Khartoum, the capital of Sudan. For "
                "thousands of years the annual flood deposited fertile silt along its banks, "
                "which allowed ancient Egyptian civilisation to grow crops in an otherwise dry "
                "landscape. Since 1970 the Aswan High Dam has controlled the flooding.",
                [
                    ("Into which sea does the Nile flow?", ["Mediterranean Sea"]),
                    ("At which lake does the Blue Nile begin?", ["Lake Tana"]),
                    ("Near which city do the two branches of the Nile meet?", ["Khartoum"]),
                    ("What did the annual flood deposit along the banks?", ["fertile silt"]),
                    ("What structure has controlled the flooding since 1970?", ["the Aswan High Dam"]),
                ],
            )
        ],
    ),
    (
        "Transistor",
        [
            (
                "A transistor is a semiconductor device used to amplify or switch electrical "
                "signals. The first working transistor was built at Bell Labs in 1947 by John "
                "Bardeen, Walter Brattain and William Shockley, who later shared the Nobel "
                "Prize in Physics. Early devices were made of germanium, but silicon soon "
                "became the dominant material because it tolerates higher temperatures. "
                "Modern processors pack billions of transistors onto a single chip, and the "
                "steady growth in that number is often described by Moore's law.",
                [
                    ("Where was the first working transistor built?", ["Bell Labs"]),
                    ("In what year was the first working transistor built?", ["1947"]),
                    ("What material were early transistors made of?", ["germanium"]),
                    ("Why did silicon become the dominant material?", ["it tolerates higher temperatures"]),
                    ("What describes the growth in the number of transistors on a chip?", ["Moore's law"]),
                ],
            )
        ],
    ),
    (
        "Plate_tectonics",
        [
            (
                "Plate tectonics is the theory that the outer shell of the Earth, the "
                "lithosphere, is broken into large plates that slowly move over the softer "
                "asthenosphere beneath. The plates travel a few centimetres per year. Where "
                "two plates pull apart, as along the Mid-Atlantic Ridge, new crust forms from "
                "rising magma. Where they collide, one plate may sink under the other in a "
                "process called subduction, producing deep ocean trenches and volcanoes. The "
                "idea grew out of Alfred Wegener's earlier hypothesis of continental drift.",
                [
                    ("What is the outer shell of the Earth called?", ["the lithosphere"]),
                    ("What forms along the Mid-Atlantic Ridge?", ["new crust"]),
                    ("What is the process of one plate sinking under another called?", ["subduction"]),
                    ("Whose hypothesis of continental drift preceded plate tectonics?", ["Alfred Wegener"]),
                ],
            )
        ],
    ),
    (
        "Printing_press",
        [
            (
                "Around 1440 the goldsmith Johannes Gutenberg developed a printing press with "
                "movable metal type in the city of Mainz. His system combined a hand mould for "
                "casting letters, an oil-based ink and a screw press adapted from those used "
                "for making wine. The most famous product of his workshop is a Latin Bible "
                "completed in about 1455, of which fewer than fifty copies survive. Printing "
                "spread quickly across Europe and made books far cheaper, which helped the "
                "ideas of the Renaissance and the Reformation reach a wide audience.",
                [
                    ("What was Johannes Gutenberg's trade?", ["goldsmith"]),
                    ("In which city did Gutenberg develop his press?", ["Mainz"]),
                    ("What kind of ink did Gutenberg's system use?", ["an oil-based ink"]),
                    ("In what language was Gutenberg's famous Bible?", ["Latin"]),
                    ("How many copies of the Gutenberg Bible survive?", ["fewer than fifty"]),
                ],
            )
        ],
    ),
    (
        "Amazon_rainforest",
        [
            (
                "The Amazon rainforest covers much of the Amazon basin in South America and is "
                "the largest tropical rainforest on Earth. Most of it lies within Brazil, with "
                "smaller parts in Peru, Colombia and six other countries. The forest is home "
                "to roughly one in ten known species and stores a huge amount of carbon in its "
                "trees and soil. Large areas have been cleared for cattle ranching and "
                "farming, and scientists warn that continued deforestation could turn parts of "
                "the forest into dry savanna.",
                [
                    ("On which continent is the Amazon rainforest?", ["South America"]),
                    ("Which country contains most of the Amazon rainforest?", ["Brazil"]),
                    ("For what have large areas of the forest been cleared?", ["cattle ranching and farming"]),
                    ("What could parts of the forest turn into?", ["dry savanna"]),
                ],
            )
        ],
    ),
    (
        "Internet_protocol_suite",
        [
            (
                "The Internet protocol suite, often called TCP/IP, is the set of rules that "
                "computers use to exchange data over the Internet. It was designed in the "
                "1970s by Vint Cerf and Bob Kahn for research networks funded by the United "
                "States Department of Defense. The Internet Protocol gives each machine an "
                "address and moves packets between networks, while the Transmission Control "
                "Protocol makes sure that data arrives complete and in order. ARPANET adopted "
                "the suite on 1 January 1983, a date often seen as the birth of the Internet.",
                [
                    ("What is the Internet protocol suite often called?", ["TCP/IP"]),
                    ("Who designed the Internet protocol suite along with Vint Cerf?", ["Bob Kahn"]),
                    ("Which protocol makes sure data arrives complete and in order?", ["the Transmission Control Protocol"]),
                    ("Which network switched to TCP/IP in 1983?", ["ARPANET"]),
                    ("On what date did ARPANET switch to TCP/IP?", ["1 January 1983"]),
                ],
            )
        ],
    ),
    (
        "Black_hole",
        [
            (
                "A black hole is a region of space where gravity is so strong that nothing, "
                "not even light, can escape. Its boundary is called the event horizon. Most "
                "black holes form when a very massive star runs out of fuel and its core "
                "collapses at the end of its life. Supermassive black holes, millions or "
                "billions of times heavier than the Sun, sit at the centres of most large "
                "galaxies. In 2019 the Event Horizon Telescope collaboration released the "
                "first image of a black hole, located in the galaxy Messier 87.",
                [
                    ("What is the boundary of a black hole called?", ["the event horizon"]),
                    ("What collapses when a massive star runs out of fuel?", ["its core"]),
                    ("At the centres of which galaxies do supermassive black holes sit?", ["most large galaxies"]),
                    ("In what year was the first image of a black hole released?", ["2019"]),
                    ("In which galaxy was the first imaged black hole?", ["Messier 87"]),
                ],
            )
        ],
    ),
    (
        "Ada_Lovelace",
        [
            (
                "Ada Lovelace was an English mathematician born in London in 1815, the only "
                "legitimate child of the poet Lord Byron. She worked with Charles Babbage on "
                "his proposed mechanical computer, the Analytical Engine. In notes attached to "
                "her translation of an Italian article about the machine, she described a "
                "method for calculating Bernoulli numbers, which is often regarded as the "
                "first published computer program. She also suggested that such a machine "
                "might one day compose music. A programming language, Ada, was named after her.",
                [
                    ("Who was Ada Lovelace's father?", ["Lord Byron"]),
                    ("What was Babbage's proposed mechanical computer called?", ["the Analytical Engine"]),
                    ("What numbers did Lovelace's method calculate?", ["Bernoulli numbers"]),
                    ("What did Lovelace suggest the machine might one day compose?", ["music"]),
                ],
            )
        ],
    ),
    (
        "Mount_Everest",
        [
            (
                "Mount Everest is the highest mountain above sea level, with its summit at "
                "8,849 metres. It lies in the Mahalangur range of the Himalayas, on the border "
                "between Nepal and the Tibet region of China. The first confirmed ascent was "
                "made on 29 May 1953 by Tenzing Norgay and Edmund Hillary, members of a British "
                "expedition. Climbers today face thin air, extreme cold and sudden storms, and "
                "most use bottled oxygen above the so-called death zone.",
                [
                    ("How high is the summit of Mount Everest?", ["8,849 metres"]),
                    ("In which range of the Himalayas does Everest lie?", ["Mahalangur"]),
                    ("Who made the first confirmed ascent with Tenzing Norgay?", ["Edmund Hillary"]),
                    ("On what date was the first confirmed ascent of Everest?", ["29 May 1953"]),
                ],
            )
        ],
    ),
]

DEV: list[Article] = [
    (
        "DNA",
        [
            (
                "Deoxyribonucleic acid, or DNA, is the molecule that carries the genetic "
                "instructions of living organisms. It consists of two long strands that wind "
                "around each other to form a double helix. Each strand is a chain of "
                "nucleotides containing one of four bases: adenine, thymine, guanine or "
                "cytosine. Adenine pairs with thymine and guanine pairs with cytosine. The "
                "double helix structure was described in 1953 by James Watson and Francis "
                "Crick, drawing on X-ray images produced by Rosalind Franklin.",
                [
                    ("What shape do the two strands of DNA form?", ["a double helix", "double helix"]),
                    ("Which base pairs with adenine?", [("thymine", "pairs with thymine")]),
                    ("In what year was the structure of DNA described?", ["1953", "in 1953"]),
                    ("Whose X-ray images helped reveal the structure?", ["Rosalind Franklin", "Franklin"]),
                ],
            )
        ],
    ),
    (
        "Magna_Carta",
        [
            (
                "Magna Carta is a charter of rights agreed by King John of England at "
                "Runnymede, near Windsor, on 15 June 1215. It was drawn up to make peace "
                "between the unpopular king and a group of rebel barons. The charter promised "
                "the protection of church rights, swift justice and limits on payments owed to "
                "the Crown. Neither side kept to it, and the pope annulled it within months, "
                "but revised versions were issued in later years. It is now seen as an early "
                "statement that the ruler is subject to the law.",
                [
                    ("Which king agreed to Magna Carta?", ["King John", "King John of England", "John"]),
                    ("Where was Magna Carta agreed?", ["Runnymede", "at Runnymede"]),
                    ("With whom was the charter meant to make peace?", ["a group of rebel barons", "rebel barons"]),
                    ("Who annulled the charter within months?", ["the pope", "pope"]),
                ],
            )
        ],
    ),
    (
        "Sahara",
        [
            (
                "The Sahara is the largest hot desert in the world, covering much of North "
                "Africa from the Atlantic Ocean to the Red Sea. Its area of about nine million "
                "square kilometres is comparable to that of the United States. Much of the "
                "surface is rocky plateau rather than sand dunes. Rainfall is very low, yet "
                "around 10,000 years ago the region was far wetter, with lakes and grasslands "
                "that supported hippos and early herding communities. Oases fed by "
                "groundwater still allow people to farm dates in some places.",
                [
                    ("How large is the Sahara?", ["about nine million square kilometres", "nine million square kilometres"]),
                    ("What covers much of the Sahara's surface?", ["rocky plateau"]),
                    ("When was the Sahara region far wetter?", ["around 10,000 years ago", "10,000 years ago"]),
                    ("What feeds the oases?", ["groundwater"]),
                ],
            )
        ],
    ),
    (
        "Compiler",
        [
            (
                "A compiler is a program that translates source code written in a high-level "
                "language into a lower-level form, such as machine code, that a processor can "
                "run. A typical compiler works in stages: a lexer breaks the text into tokens, "
                "a parser builds a syntax tree, and later passes optimise the program and "
                "generate code. Grace Hopper wrote one of the first compilers, the A-0 system, "
                "in 1952. Unlike an interpreter, which executes a program line by line, a "
                "compiler translates the whole program before it runs.",
                [
                    ("What breaks the source text into tokens?", ["a lexer", "lexer"]),
                    ("What does the parser build?", ["a syntax tree", "syntax tree"]),
                    ("What was the name of Grace Hopper's early compiler?", ["the A-0 system", "A-0 system", "A-0"]),
                ],
            )
        ],
    ),
]

EXPECTED_TRAIN_QUESTIONS = 50
EXPECTED_DEV_QUESTIONS = 15
CONTEXT_CHARS = (300, 700)
MAX_ANSWER_WORDS = 5


def _locate(title: str, context: str, answer: Answer, previous: list[dict]) -> tuple[str, int]:
    """Return (text, answer_start) for one answer, refusing ambiguous spans.

    A plain string must occur exactly once in the context, unless it lies
    inside an earlier (longer) answer to the same question, in which case it
    is located inside that span, as SQuAD's alternative answers are. A
    (text, anchor) pair locates ``text`` inside the unique string ``anchor``.
    """
    if isinstance(answer, tuple):
        text, anchor = answer
        if context.count(anchor) != 1 or text not in anchor:
            raise ValueError(f"{title}: anchor {anchor!r} must occur once and contain {text!r}")
        return text, context.find(anchor) + anchor.find(text)
    text = answer
    if context.count(text) == 1:
        return text, context.find(text)
    for prev in previous:
        if text in prev["text"]:
            return text, prev["answer_start"] + prev["text"].find(text)
    raise ValueError(f"{title}: answer {text!r} occurs {context.count(text)} times; give an anchor")


def _build_split(articles: list[Article], prefix: str, multi_answer: bool) -> dict:
    """Turn the Python literals above into SQuAD v1.1 JSON, computing offsets."""
    data = []
    counter = 0
    for title, paragraphs in articles:
        out_paragraphs = []
        for context, qas in paragraphs:
            lo, hi = CONTEXT_CHARS
            if not lo <= len(context) <= hi:
                raise ValueError(f"{title}: context has {len(context)} chars, want {lo}-{hi}")
            out_qas = []
            for question, answers in qas:
                if not answers or (len(answers) > 1 and not multi_answer) or len(answers) > 3:
                    raise ValueError(f"{title}: bad number of answers for {question!r}")
                out_answers: list[dict] = []
                for answer in answers:
                    text, start = _locate(title, context, answer, out_answers)
                    if not 1 <= len(text.split()) <= MAX_ANSWER_WORDS:
                        raise ValueError(f"{title}: answer {text!r} is not 1-{MAX_ANSWER_WORDS} words")
                    assert context[start : start + len(text)] == text
                    out_answers.append({"text": text, "answer_start": start})
                counter += 1
                out_qas.append(
                    {"id": f"{prefix}-{counter:04d}", "question": question, "answers": out_answers}
                )
            out_paragraphs.append({"context": context, "qas": out_qas})
        data.append({"title": title, "paragraphs": out_paragraphs})
    return {"version": "1.1", "data": data}


def _count_questions(split: dict) -> int:
    return sum(len(p["qas"]) for a in split["data"] for p in a["paragraphs"])


def build() -> dict[str, dict]:
    """Build and validate both splits; returns {"train": ..., "dev": ...}."""
    splits = {
        "train": _build_split(TRAIN, "fx-train", multi_answer=False),
        "dev": _build_split(DEV, "fx-dev", multi_answer=True),
    }
    n_train, n_dev = _count_questions(splits["train"]), _count_questions(splits["dev"])
    if (n_train, n_dev) != (EXPECTED_TRAIN_QUESTIONS, EXPECTED_DEV_QUESTIONS):
        raise ValueError(f"got {n_train} train / {n_dev} dev questions")
    ids = [q["id"] for s in splits.values() for a in s["data"] for p in a["paragraphs"] for q in p["qas"]]
    if len(ids) != len(set(ids)):
        raise ValueError("question ids are not unique")
    return splits


def main() -> int:
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name, split in build().items():
        path = OUT_DIR / f"{name}.json"
        text = json.dumps(split, indent=1, ensure_ascii=False) + "\n"
        path.write_text(text, encoding="utf-8")
        n_par = sum(len(a["paragraphs"]) for a in split["data"])
        print(f"wrote {path} ({n_par} paragraphs, {_count_questions(split)} questions, {len(text.encode())} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
