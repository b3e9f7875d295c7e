"""The small Markov setting the later-stage predictors are tested on: three singleton lags at
d = 20, 4 generated tokens, 256 fresh sequences a step, q = 1e-3, float64 (under AdamW its KL
ladder reaches stage 3, t_2 = 40 and t_3 = 220, in 5 s)."""

from simulate.incremental.markov_training import MarkovTrainConfig

SINGLETON_LAGS = MarkovTrainConfig(
    vocab=20,
    blocks=(1, 1, 1),
    generated=4,
    heads=3,
    precision="float64",
    batch=256,
    validation=256,
    steps=400,
    log_every=5,
    chunk=400,
    query_scale=1e-3,
)
