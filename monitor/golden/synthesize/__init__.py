"""`rag-monitor golden synthesize`: golden rows generated from corpus chunks, for human review.

A hand-labelled golden set is small and ages as the corpus changes; generated rows fill the
slices it lacks, but only rows a retriever can be fairly held to are worth a reviewer's time. So
a `Generator` proposes a question per *task* (a query type and one or two source chunks) —
`TemplateGenerator` offline and deterministic (tests, air-gapped runs), `LLMGenerator` through the
configured Anthropic or OpenAI-compatible backend — and every proposal passes the filters below in
order; the first that fails names its drop reason:

1. `malformed` (or `backend_error`): no usable question came back;
2. `duplicate`: the same question, or one with ≥ 80 % of its content words, is already kept,
   pending or in an existing golden file;
3. `answer_in_question`: the question gives its own answer away;
4. `answer_not_in_source`: an evidence quote (or an exact-match answer) is not in the source
   chunks — the reference answer would not be the corpus's;
5. `answer_in_corpus` (unanswerable rows): what the question asks for is in the corpus after all;
6. `target_error`, then `not_retrieved` (answerable rows: a source chunk is not in the target's
   top k, default 5 — the row would measure a question nobody's retriever answers) or
   `answer_in_retrieval` (unanswerable rows: a retrieved chunk holds what is asked).

Diversity: tasks are planned per query type (a quota each, `attempts` tasks a kept row at most,
which also bounds what an LLM run can cost) and run round-robin, one task a type a round, until
every quota is met or its tasks are spent; a chunk that is the source of a kept row is not used
again. Unanswerable rows ask, on a chunk's subject, for something the corpus does not hold.
Kept rows are ordinary golden rows (`schema.GoldenRow`) with `source: synthetic`, the source
chunks' text in `relevant_chunks` and their licence.

The package: `corpus` reads the chunks, `tasks` is what generators are given and give back,
`template` and `llm` are the generators (`generators` picks one), `planning` plans the tasks,
`filters` holds the filters, `run` runs them (`synthesize`), `report` counts what was kept and
dropped, `rows` makes and writes the golden rows; `monitor.golden.render` draws the report.
"""

from monitor.golden.synthesize.corpus import CorpusRead, SourceChunk, read_corpus
from monitor.golden.synthesize.generators import LLM_GENERATORS, make_generator
from monitor.golden.synthesize.llm import TOOL_NAME, LLMGenerator
from monitor.golden.synthesize.planning import plan, quotas_for
from monitor.golden.synthesize.report import SynthesisReport
from monitor.golden.synthesize.rows import write_rows
from monitor.golden.synthesize.run import synthesize
from monitor.golden.synthesize.tasks import (
    REASONS,
    SYNTHETIC,
    UNANSWERABLE,
    Failure,
    Generator,
    Proposal,
    Task,
)
from monitor.golden.synthesize.template import TemplateGenerator

__all__ = [
    "LLM_GENERATORS",
    "REASONS",
    "SYNTHETIC",
    "TOOL_NAME",
    "UNANSWERABLE",
    "CorpusRead",
    "Failure",
    "Generator",
    "LLMGenerator",
    "Proposal",
    "SourceChunk",
    "SynthesisReport",
    "Task",
    "TemplateGenerator",
    "make_generator",
    "plan",
    "quotas_for",
    "read_corpus",
    "synthesize",
    "write_rows",
]
