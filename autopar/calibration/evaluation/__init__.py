"""How far a calibrated answer can be trusted: validation by source, novelty of a layout, the record on
pairs of layouts, what a fit did, memory verdicts, and the assumptions an answer rests on."""
