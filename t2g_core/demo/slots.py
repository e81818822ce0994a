"""The demo summary's eight slots: each slot's vocabulary and its clause in the summary template, read by the
generator and scorer (:mod:`t2g_core.demo.summarization`) and by the free-text reader (:mod:`t2g_core.demo.facts`)."""

SLOTS = ("name", "city", "count", "pet", "color", "job", "day", "food")
VOCAB: dict[str, tuple[str, ...]] = {
    "name": ("Ada", "Ben", "Cai", "Dora", "Eli", "Finn", "Gus", "Hana", "Ivo", "Jade", "Kim", "Lena"),
    "city": ("Paris", "Quito", "Oslo", "Lima", "Rome", "Cairo", "Dakar", "Hanoi", "Perth", "Riga"),
    "count": ("2", "3", "4", "5", "6", "7", "8", "9"),
    "pet": ("dogs", "cats", "birds", "goats", "ducks", "rabbits", "horses", "mice"),
    "color": ("gray", "black", "white", "brown", "red", "blue", "green", "yellow"),
    "job": ("coach", "baker", "nurse", "pilot", "judge", "farmer", "tailor", "driver", "painter", "chef"),
    "day": ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
    "food": ("beans", "rice", "pasta", "soup", "bread", "tacos", "curry", "salad", "noodles", "cheese"),
}
# the summary template, one clause per slot in this order: (slot, text before the value, text after it)
TEMPLATE = (
    ("name", " named ", ""),
    ("city", " lives in ", ""),
    ("count", " with ", " pets"),
    ("pet", ", all ", ""),
    ("color", " colored ", ""),
    ("job", ", works as a ", ""),
    ("day", ", rests on ", ""),
    ("food", " and enjoys eating ", ""),
)
