"""One demo post's facts (slot -> value), the fixture of the fact-reading, diagnosis and summary-error tests."""

CAI = {
    "name": "Cai",
    "city": "Quito",
    "count": "3",
    "pet": "dogs",
    "color": "gray",
    "job": "coach",
    "day": "Sunday",
    "food": "beans",
}
