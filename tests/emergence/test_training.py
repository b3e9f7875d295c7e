"""simulate.emergence.training: the experiment's bad input and its logged attention block
(spec emergence.md §4, §6)."""

import jax
import numpy as np
import pytest

from figures.cli import main
from simulate.emergence.training import EmergenceConfig, problem, task_data


@pytest.mark.parametrize(
    "argv",
    [
        ["--s", "0"],
        ["--S", "1"],
        ["--lr", "-1"],
        ["--model", "mixer", "--attention-bias", "3"],
        ["--layers", "3"],
    ],
)
def test_bad_input_exits_2(tmp_path, argv):
    assert main(["run", "emergence", "--out", str(tmp_path / "r"), *argv]) == 2


def test_attention_block_observable_is_the_x1_to_x0_block():
    S = 3
    cfg = EmergenceConfig(S=S, heads=2, head_dim=2, batch=2, eval_batch=4)
    p = problem(cfg)
    model = p.init(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    block = np.asarray(p.observe(model)["attention_block"])
    evals = task_data(cfg)[3]
    attn = np.asarray(jax.vmap(lambda x: model.logits_and_attention(x)[1])(evals[:, :-1]))
    # query S - 1 + i predicts cell i of x_1; keys 0 .. S - 1 are the cells of x_0
    np.testing.assert_allclose(block, attn[:, 0, :, S - 1 : 2 * S - 1, :S].mean(0), atol=1e-6)
    np.testing.assert_allclose(block[:, 0].sum(-1), 1, atol=1e-5)  # x_1's first cell sees x_0 only
