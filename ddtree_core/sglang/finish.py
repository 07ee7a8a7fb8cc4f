"""A stop token or stop string accepted within the max_new_tokens budget ends the request there.

SGLang 0.5.15's `Req.update_finish_state(new_accepted_len)` ends a request with FINISH_LENGTH at the
cap as soon as `len(output_ids) >= max_new_tokens`, before it looks for stop strings and stop tokens.
A speculative round appends its whole accepted run at once, so a run that accepts the EOS and also
crosses the cap finished as `length` and sent the tokens after the EOS (`[..., <|im_end|>, "\\n"]`).
SGLang fixed the order after 0.5.15.

`stop_within_budget` runs just before SGLang's method: it judges the run's tokens within the budget
as SGLang would judge a run that ended at the cap, and SGLang's method then finds the request finished,
or ends it with FINISH_LENGTH at the cap as before. The output streamer sends `output_ids_through_stop`,
i.e. `output_ids[:finished_len]`, as the token ids, the detokenizer's input, `completion_tokens` and the
logprobs, so `finished_len` is what trims the response.

Example, max_new_tokens = 6, EOS = 2, output_ids [11, 12, 13] before a round that accepts [14, 2, 198, 15]:
SGLang 0.5.15 alone ends it as FINISH_LENGTH(6) and sends 11 12 13 14 2 198; `stop_within_budget` first
ends it as FINISH_MATCHED_TOKEN(2) with finished_len 5, so 11 12 13 14 2 is sent.

Pure Python: SGLang's Req comes in as an argument, nothing here imports SGLang.
"""

from __future__ import annotations

from array import array
from types import SimpleNamespace


def stop_within_budget(req, new_accepted_len: int = 1) -> None:
    """Finish `req` at the first stop among its newly accepted tokens that lie within max_new_tokens.

    Acts only when the run reaches the cap and `req` is neither finished nor holding a `to_finish`;
    otherwise SGLang's own method already decides right. It runs Req's own checks, in SGLang's order
    (`_check_vocab_boundary_finish`, `_check_str_based_finish`: stop strings and regexes beat stop tokens
    of the same run, `_check_token_based_finish`), over `output_ids` cut at the cap, then puts the tokens
    past the cap back. A stop found sets `finished_reason` and `finished_len` (just past the stop); no stop
    leaves `req` unfinished, for `update_finish_state` to end at the cap. Grammar termination stays
    SGLang's: its method looks at it only below the cap.

    Example: max_new_tokens 6, EOS 2, output_ids [11, 12, 13, 14, 2, 198, 15] after a run of 4:
    finished_reason FINISH_MATCHED_TOKEN(2), finished_len 5, output_ids unchanged.
    """
    cap = req.sampling_params.max_new_tokens
    within = new_accepted_len - (len(req.output_ids) - cap)  # the run's tokens up to the cap
    if len(req.output_ids) < cap or within <= 0 or req.finished() or req.to_finish:
        return
    past_cap = req.output_ids[cap:]
    del req.output_ids[cap:]
    try:
        tokens = req.output_ids[-within:]
        if not req._check_vocab_boundary_finish(tokens) and not req._check_str_based_finish(within):
            req._check_token_based_finish(tokens)
    finally:
        req.output_ids.extend(past_cap)


def length_first(req_class) -> bool:
    """Whether `req_class.update_finish_state` lets the cap beat an EOS accepted before it (0.5.15's does).

    Detected by behaviour: a bare instance with two tokens of budget accepts [EOS, 7, 8] in one run; the
    length-first order ends it at the cap (finished_len 2), the stop-first order at the EOS (1).
    """
    probe = req_class.__new__(req_class)
    sampling = SimpleNamespace(
        max_new_tokens=2, ignore_eos=False, stop_token_ids=None, stop_strs=[], stop_regex_strs=[],
        stop_str_max_len=0, stop_regex_max_len=0,
    )  # fmt: skip
    vars(probe).update(
        output_ids=array("q", [2, 7, 8]), sampling_params=sampling, eos_token_ids={2}, tokenizer=None,
        vocab_size=16, grammar=None, decoded_text="", finished_reason=None, finished_len=None, to_finish=None,
    )  # fmt: skip
    req_class.update_finish_state(probe, 3)
    return probe.finished_len == 2
