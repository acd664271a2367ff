"""A corpus the tests write themselves (no downloads): 30 documents on distinct topics, each a few paragraphs of
its own sentences among filler every document shares, and for each a question that asks for it in other words
(other word forms, other order, few of its exact phrases), so retrieval is tested through stemming and BM25, not
by string matching."""

from __future__ import annotations

import random
from pathlib import Path

# (file name, what the document says, a question phrased differently)
TOPICS: tuple[tuple[str, str, str], ...] = (
    ("kettle.md", "An electric kettle boils water faster than a pan on the stove because its heating element sits "
     "in the water. Descaling the kettle with vinegar removes limescale.",
     "why is boiling in electric kettles quicker than using a pan?"),
    ("sourdough.txt", "A sourdough starter is flour and water fermented by wild yeast and lactobacilli. Feed the "
     "starter daily; the bread rises slowly and tastes sour.", "how often should a starter for sour bread be fed?"),
    ("tides.md", "Tides are caused by the gravitational pull of the moon and the sun on the oceans. Spring tides "
     "happen at full and new moon.", "what causes the ocean tide to rise and fall?"),
    ("photosynthesis.rst", "Photosynthesis turns light, carbon dioxide and water into glucose and oxygen inside "
     "chloroplasts. Chlorophyll absorbs red and blue light.", "which pigment absorbs light for plants making sugar?"),
    ("bicycle.txt", "To fix a punctured bicycle tyre, remove the inner tube, find the hole by listening for air, "
     "roughen the rubber and apply a patch.", "how do I repair a flat tire puncture on my bike?"),
    ("volcano.md", "Volcanoes erupt when magma rises through the crust. Basaltic lava flows are runny; andesitic "
     "eruptions are explosive and build stratovolcanoes.", "what makes a volcanic eruption explosive?"),
    ("chess.md", "In chess, castling moves the king two squares toward a rook, which jumps over the king. It is "
     "illegal when the king is in check.", "when are you not allowed to castle your king?"),
    ("coffee.txt", "Espresso is brewed by forcing hot water at nine bars of pressure through finely ground coffee "
     "for about 25 seconds, giving a crema.", "what pressure does an espresso machine brew at?"),
    ("rust_ownership.md", "Rust's ownership rules: each value has one owner, and borrowing lets references read a "
     "value; the borrow checker rejects dangling references.", "how does the borrowing checker prevent dangling "
     "pointers?"),
    ("python_gil.md", "CPython's global interpreter lock lets only one thread execute bytecode at a time, so "
     "CPU-bound threads don't run in parallel; use multiprocessing.", "why don't python threads speed up "
     "computation?"),
    ("vaccines.txt", "Vaccines train the immune system by presenting an antigen, so memory B cells and T cells "
     "respond faster to a later infection.", "how does immunisation prepare immune memory cells?"),
    ("glaciers.md", "Glaciers form where snowfall exceeds melting for many years; the snow compacts into firn and "
     "then ice that flows downhill under its own weight.", "how does compacted snow become a flowing glacier?"),
    ("bees.md", "Honeybees communicate the direction of flowers with the waggle dance; the angle of the dance "
     "relative to vertical gives the direction relative to the sun.", "how do honey bees tell others where "
     "flowers are?"),
    ("taxes.txt", "A tax deduction lowers taxable income, while a tax credit reduces the tax owed directly, so a "
     "credit is worth more than a deduction of the same amount.", "difference between deductions and credits "
     "on taxes"),
    ("knots.md", "The bowline knot makes a fixed loop at the end of a rope that does not slip or jam, used by "
     "sailors and climbers for rescue.", "which knot ties a loop that won't slip?"),
    ("compost.txt", "Compost needs a balance of green nitrogen-rich material and brown carbon-rich material, "
     "moisture and turning to let oxygen in.", "what ratio of greens and browns makes good composting?"),
    ("jet_lag.md", "Jet lag happens when the circadian clock is out of step with local time; morning light after "
     "flying east helps the body clock shift.", "how to recover from jetlag after an eastward flight?"),
    ("sql_index.md", "A B-tree index lets a database find rows without scanning the whole table; an index on the "
     "columns in a WHERE clause speeds up the query.", "why would indexing columns make database queries "
     "faster?"),
    ("penguins.txt", "Emperor penguins breed in the Antarctic winter; the male incubates the single egg on his "
     "feet for about two months without eating.", "which penguin parent keeps the egg warm?"),
    ("guitar.md", "To tune a guitar to standard tuning, the strings from low to high are E A D G B E; tune each "
     "string against a reference pitch or a tuner.", "what notes are the strings of a guitar tuned to?"),
    ("rainbow.md", "A rainbow appears when sunlight is refracted, reflected and dispersed inside raindrops, with "
     "red on the outside of the arc.", "why does refraction in rain drops make rainbows?"),
    ("mortgage.txt", "A fixed-rate mortgage keeps the same interest rate for the whole term; an adjustable-rate "
     "mortgage changes with a reference rate after an initial period.", "are adjustable mortgages' interest "
     "rates fixed?"),
    ("sleep.md", "Adults need seven to nine hours of sleep; deep slow-wave sleep restores the body and REM sleep "
     "consolidates memories.", "how many hours should grown-ups sleep each night?"),
    ("solar_panels.txt", "Photovoltaic solar panels convert sunlight to direct current; an inverter changes it to "
     "alternating current for the home.", "what converts a solar panel's DC into AC?"),
    ("git_rebase.md", "git rebase replays your commits on top of another branch, giving a linear history; never "
     "rebase commits others have already pulled.", "when shouldn't I rebase my branch's commits?"),
    ("earthquakes.md", "Earthquakes release stress along faults; the moment magnitude scale measures the energy, "
     "and each whole number is about 32 times more energy.", "how much more energetic is each step of quake "
     "magnitude?"),
    ("cheese.txt", "Cheese is made by curdling milk with rennet, cutting the curd, draining the whey, then salting "
     "and ageing the cheese.", "what enzyme curdles milk to make cheeses?"),
    ("origami.md", "Origami folds a single square sheet of paper without cuts; the crane is made from a bird base "
     "folded from a square.", "how are paper cranes folded?"),
    ("lighthouse.txt", "Lighthouses use a Fresnel lens to focus the lamp into a beam visible for many miles; each "
     "lighthouse flashes a distinct pattern.", "what lens lets a light house beam reach far?"),
    ("marathon.md", "Marathon runners taper their training in the last weeks and load carbohydrates so glycogen "
     "stores last the 42 kilometres.", "what should runners eat before a marathon race?"),
)
FILLER = ("The notes below were written over several years and kept in one folder. Some paragraphs repeat "
          "general advice that applies to many subjects, such as checking sources, writing things down and "
          "reviewing them later. This paragraph is shared by every document in the folder.")


def write_corpus(folder: Path, seed: int = 51) -> dict[str, str]:
    """The 30 documents in ``folder`` (made), each its topic among filler; question -> file name."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for name, text, _question in TOPICS:
        sentences = text.split(". ")
        paragraphs = [f"# {Path(name).stem.replace('_', ' ').title()}", FILLER]
        for sentence in sentences:
            paragraphs.append(sentence.rstrip(".") + ".")
            if rng.random() < 0.5:
                paragraphs.append(FILLER)
        (folder / name).write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return {question: name for name, _text, question in TOPICS}


def sync_killed_at(collection: str, line_prefix: str, timeout: float) -> None:
    """A real `nalar knowledge sync` child, SIGKILLed as soon as its progress (stderr) prints a line starting
    with ``line_prefix``; fails if it ended by itself first."""
    import signal
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    child = subprocess.Popen([sys.executable, "-m", "app", "knowledge", "sync", collection], cwd=root,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    try:
        for line in child.stderr:
            if line.startswith(line_prefix):
                child.send_signal(signal.SIGKILL)
                break
    finally:
        child.stderr.close()
    assert child.wait(timeout=timeout) == -signal.SIGKILL, f"the sync ended before {line_prefix!r}: nothing killed"
