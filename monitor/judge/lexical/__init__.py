"""An offline, deterministic judge: sentence alignment and word overlap instead of a language model.

It is an APPROXIMATION, and it is the default only because it needs no network, costs nothing and
runs in well under a millisecond: the demo and the tests can judge every record. What it does:

- claims: the answer is split into sentences (a lead-in such as "According to the documents," is
  dropped; refusal sentences are not claims). A terse answer ("1990.", "Derek Cha", a name of any
  length) is no claim on its own, so it is read together with the question: the answer's names
  and numbers must be in one sentence, and that sentence must be the one the question points at:
  it is scored by the question words it holds (rarer words weigh more) and those within a few
  tokens of the answer (half across a comma or "and": "meteorologist Ted Fujita, cancer
  researchers Charles Huggins"), plus, for a multi-hop question, those of a sentence in another
  chunk that names what it is about (the bridge entity). An answer of a kind (a year, a number,
  a name) is weighed against the context's other words of that kind, scored alike: supported
  when it outscores the best of them by `decide_margin`, `contradicted`
  (`question_answered_elsewhere`) when another sentence's alternative outscores it and its own
  sentence holds little of the question, otherwise `uncertain` (`same_kind_alternative`). Only
  a word that can fill the question's slot is an alternative ("who" asks for a person, "where"
  and "which city" for a place, "when" for a time, "how many" for a number; a name's type is read
  from the words around it: "directed by", "in", "... University", a month, a nationality
  before a noun), and an answer that cannot fill it (a month for "which writer?", a bare number
  for "what company?") is `not_in_context` (`answer_not_of_asked_kind`). A
  phrase answer is compared with the best-scoring sentence. Any answer to a choice question
  ("..., A or B?") is `uncertain`: the other side is not checked. A yes/no answer is decided only
  when every fact the question asks about is found (then "yes" is supported, "no" contradicted),
  never for a comparison ("the same", "before", "consistent"); otherwise `uncertain`. "Are A and
  B both P?" looks for each entity with the property: yes when both hold it, no when a sentence
  naming one gives it another value of the property's named kind (a Hungarian director for
  "American directors"), otherwise `uncertain`.
- alignment: each claim is compared with every SENTENCE of the chunks (not the whole chunk): a
  number from one sentence and a subject from another support nothing. Words are lower-cased,
  crudely stemmed and mapped through a small synonym table ("established" = "founded"), so a
  plain paraphrase still aligns. The claim's numbers must be in the aligned sentence; its names
  (capitalised words, accents and possessives normalised) too, or, when that sentence refers back
  ("he", "it", "its", ...), be the subject of the sentence before it or of the chunk's first
  sentence. A name the question gives is its topic and need not be found; a capitalised first
  word the context lacks is read as a name. A claim that joins two sentences is supported by the
  pair when each adds words of its own, and a name that one of them supplies stands there next to
  a word it stands next to in the claim; a pair that states the rest of the claim without its
  name or number is evidence that the name or number was swapped in (`name_or_number_elsewhere`);
  a pair whose sentence holds one of the claim's names more than a few tokens away from the words
  it stands next to in the claim leaves the claim `uncertain` (`name_misplaced`).
- polarity: a claim that negates what the aligned sentence asserts, or asserts what it negates
  (not, no, never, n't, without, ... scoped to the next few words; a word the sentence also
  asserts outside that scope does not count as negated; a terse answer to a negated question, or
  a bare "None.", agrees with a sentence that negates), is contradicted; so is one
  whose before/after, earlier/later, more/less, higher/lower, larger/smaller, older/younger is the
  opposite of the sentence's, and one that states such a relation the sentence does not state is
  not supported.
- verdict per claim: `supported` when the best sentence meeting those requirements holds at least
  `support_threshold` of the claim's content words (with `claim_margin` of them to spare: else
  `uncertain`, `low_margin`; a claim that negates words its sentence lacks altogether is `uncertain`
  too, `negation_unchecked`: the rest aligns, the negation is not checked); `contradicted` when the
  sentence that states the rest of the claim gives another number, or the polarity flips;
  `not_in_context` when a number or name is nowhere to be found, or little of the claim aligns;
  `uncertain` in between (low alignment but nothing missing or contradicted: multi-hop claims, heavy
  paraphrase). Uncertain claims are counted apart and left out of faithfulness; an answer whose
  claims are all uncertain has no faithfulness and no hallucination verdict rather than a confident
  wrong one.
  A supported claim quotes its aligned sentence as evidence (the text is the chunk's own).
- refusal (`answer_admits_uncertainty`): phrase patterns ("I don't know", "not in the provided
  documents", "couldn't find", ...).
- answerable_from_context: word overlap cannot tell a chunk that *answers* the query from one
  that merely shares its topic, so this judge reads the answer as evidence. For an answer that is
  not a refusal: the context held the answer when most decided claims are supported, or when the
  supported claims repeat at least `supported_query_coverage` of the query's content words, or
  when one chunk holds `answerable_coverage` of them and a supported claim touches the query. For
  a refusal: when one chunk holds `answerable_coverage` of the query's content words — which is
  what `false_refusal` rests on.
- answer_relevance: the share of the query's content words that the answer repeats (1 for a
  refusal).

What it cannot do: synonyms beyond its table, inference, coreference beyond "the subject of the
previous or the chunk's first sentence", a name's type beyond the cues around it, comparing two
facts (a yes/no or "A or B?" answer is mostly undecided), or knowing whether a chunk *answers* the
query. On public QA data (`bench/lexical_judge.py`, docs/judges.md) it separates grounded from
edited answers well; calibrate (`monitor.judge.calibrate`) before trusting its scores on your
traffic.
"""

from monitor.judge.lexical.judge import LexicalJudge
from monitor.judge.lexical.text import ABBREVIATIONS, CACHES, SENTENCE_END, is_refusal, split_claims

__all__ = ["ABBREVIATIONS", "CACHES", "SENTENCE_END", "LexicalJudge", "is_refusal", "split_claims"]
