"""Figure registry: every figure id of ../shared/papers/README.md."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    id: str
    paper: str
    description: str
    config: type
    run: Callable


def _incremental_clustering_emergence() -> dict[str, Figure]:
    from figures import (
        clustering_head_ablations,
        clustering_head_attention,
        clustering_head_finetune,
        clustering_head_fixed_point,
        clustering_head_loss_spike,
        clustering_head_sandbox,
        emergence_ca_plateau,
        emergence_heads_vs_dim,
        emergence_linear_map,
        emergence_mixer,
        emergence_sparsity,
        emergence_times,
        incremental_dataset_size,
        incremental_full,
        incremental_head_dynamics,
        incremental_importance,
        incremental_init_scale,
        incremental_minimal,
        incremental_ode,
        incremental_timing,
    )
    from figures.head_config import HeadOdeConfig

    return {
        "clustering-head-attention": Figure(
            "clustering-head-attention", "clustering-head",
            "probe attention of one class at epoch 0 and at the end; first-block attention "
            "mass A_k over epochs, mean +- std over seeds, with A_k = 1 and k/L",
            clustering_head_attention.AttentionConfig, clustering_head_attention.run),
        "clustering-head-ablations": Figure(
            "clustering-head-ablations", "clustering-head",
            "success rate (Wilson 95%) and final test accuracy vs lr (with 2/lr), batch and m, "
            "one axis at a time around the default; per-seed outcomes of the default setting",
            clustering_head_ablations.AblationsConfig, clustering_head_ablations.run),
        "clustering-head-sandbox": Figure(
            "clustering-head-sandbox", "clustering-head",
            "visual sandbox of one seed: the paper's 4 x 4 panel grid (E, P, E + P, Z; probe "
            "attention, VZ, xi by class with level lines; N(xi), FFN receptors, emitters, h; "
            "read-out regions, simplex, loss, accuracy) at frame epochs, and a GIF (MP4 with "
            "ffmpeg) over training",
            clustering_head_sandbox.SandboxConfig, clustering_head_sandbox.run),
        "clustering-head-finetune": Figure(
            "clustering-head-finetune", "clustering-head",
            "curriculum p = 2 -> p = 3 vs p = 3 from scratch: loss, accuracy and success rates of "
            "both arms, decision regions and the 21 histogram clusters at fine-tuning start/end",
            clustering_head_finetune.FinetuneConfig, clustering_head_finetune.run),
        "clustering-head-loss-spike": Figure(
            "clustering-head-loss-spike", "clustering-head",
            "loss spikes while fine-tuning p = 2 -> 3: loss, ||grad||, min ||xi||, raw and Adam-"
            "preconditioned sharpness with 2/lr and 38/lr; probes and N(xi) rotation across a spike",
            clustering_head_loss_spike.LossSpikeConfig, clustering_head_loss_spike.run),
        "clustering-head-fixed-point": Figure(
            "clustering-head-fixed-point", "clustering-head",
            "symmetry defect of P from the ideal init: population full batch stays on the "
            "symmetric subspace, train-set and minibatch runs leave it; loss and A_k",
            clustering_head_fixed_point.FixedPointConfig, clustering_head_fixed_point.run),
        "emergence-linear-map": Figure(
            "emergence-linear-map", "emergence",
            "linear map mod 2: per-cell loss staircase with floor and step levels, head "
            "entropies with the responsible heads, M vs the x_1 -> x_0 attention block (final, "
            "and one head before/after a drop) and pattern mass (blog Fig. 3)",
            emergence_linear_map.LinearMapConfig, emergence_linear_map.run),
        "emergence-mixer": Figure(
            "emergence-mixer", "emergence",
            "causal MLP-Mixer vs causal transformer on the linear map, loss vs step for several "
            "sparsities (blog Fig. 6)", emergence_mixer.MixerConfig, emergence_mixer.run),
        "emergence-sparsity": Figure(
            "emergence-sparsity", "emergence",
            "linear map: final loss vs density s/S per state size S, with the floor and the "
            "search-space size ln C(S, s) (blog Fig. 4 left)", emergence_sparsity.SparsityConfig,
            emergence_sparsity.run),
        "emergence-times": Figure(
            "emergence-times", "emergence",
            "linear map: CDFs over 32 vmapped seeds of per-cell and per-run emergence times vs "
            "H and vs S, fraction of runs never emerged, with the lottery prediction",
            emergence_times.TimesConfig, emergence_times.run),
        "emergence-heads-vs-dim": Figure(
            "emergence-heads-vs-dim", "emergence",
            "linear map: final loss and cells emerged vs heads H at scaling width (d_h fixed) and "
            "fixed width, with the lottery prediction; CA half not drawn (blog Fig. 5)",
            emergence_heads_vs_dim.HeadsVsDimConfig, emergence_heads_vs_dim.run),
        "emergence-ca-plateau": Figure(
            "emergence-ca-plateau", "emergence",
            "cellular automaton: loss vs step per state size S with and without the attention "
            "bias, plateau length vs S, initial attention mass on the neighbourhood (blog Fig. 4 "
            "middle/right)", emergence_ca_plateau.CaPlateauConfig, emergence_ca_plateau.run),
        "incremental-ode": Figure("incremental-ode", "incremental",
                                  "reduced head ODE: attention, values, loss with predicted stages "
                                  "(paper Fig. 10)", HeadOdeConfig, incremental_ode.run),
        "incremental-timing": Figure("incremental-timing", "incremental",
                                     "predicted vs measured stage times: reduced ODE across eps "
                                     "and m, both metrics; minimal transformer across q and m",
                                     incremental_timing.TimingConfig, incremental_timing.run),
        "incremental-head-dynamics": Figure(
            "incremental-head-dynamics", "incremental",
            "minimal transformer's head attention and value alignment per block, with the "
            "reduced ODE (rebuttal Fig. B)", incremental_head_dynamics.HeadDynamicsConfig,
            incremental_head_dynamics.run),
        "incremental-full": Figure(
            "incremental-full", "incremental",
            "full one-layer transformer: composite attention with lag blocks, KL ladder to the "
            "truncated teachers and learned baselines (paper Figs. 2-3)",
            incremental_full.FullConfig, incremental_full.run),
        "incremental-dataset-size": Figure(
            "incremental-dataset-size", "incremental",
            "early stopping selects a smaller-context class with fewer training sequences "
            "(paper Fig. 5)", incremental_dataset_size.DatasetSizeConfig,
            incremental_dataset_size.run),
        "incremental-minimal": Figure(
            "incremental-minimal", "incremental",
            "minimal transformer: ideal attention, KL ladder with stages, validation loss with "
            "yardsticks, composite attention maps (paper Fig. 1, Figs. 6-7)",
            incremental_minimal.MinimalConfig, incremental_minimal.run),
        "incremental-init-scale": Figure(
            "incremental-init-scale", "incremental",
            "excess validation loss against the step for query-init scales q, Xavier and q = 0 "
            "(paper Fig. 4 left)", incremental_init_scale.InitScaleConfig,
            incremental_init_scale.run),
        "incremental-importance": Figure(
            "incremental-importance", "incremental",
            "excess validation loss against the step for importance ratios m, stage-1 step vs m "
            "(paper Fig. 4 right)", incremental_importance.ImportanceConfig,
            incremental_importance.run),
    }


def _focus_dilution() -> dict[str, Figure]:
    from figures import (
        focus_dilution_embedding_pca,
        focus_dilution_entropy_cycles,
        focus_dilution_same_pi,
        focus_dilution_stages,
        focus_dilution_symmetry_breaking,
        focus_dilution_text,
        focus_dilution_timing,
    )

    entries = [
        (focus_dilution_stages, "StagesConfig",
         "flow: singular values, attention on token 0, loss plateaus, rates (experiment A)"),
        (focus_dilution_same_pi, "SamePiConfig",
         "chains with the same pi: Stage I shared, Stage II at c_P (experiment B)"),
        (focus_dilution_embedding_pca, "PcaConfig",
         "PCA of the embedding rows over time, theta_c^1, redistribution (experiment C)"),
        (focus_dilution_entropy_cycles, "CyclesConfig",
         "per-query attention entropy and embedding norms over two cycles (experiment D)"),
        (focus_dilution_timing, "TimingConfig",
         "stage onsets against ln(1/eps) with slopes 1/sigma and 1/sigma + 1/c; growth at 2c"),
        (focus_dilution_symmetry_breaking, "SymmetryConfig",
         "stall at delta = 0 and escape rate against delta with mu_IV and k_delta"),
        (focus_dilution_text, "TextConfig",
         "attention of tracked queries on real text (bundled CPython text or --text PATH)"),
    ]
    return {m.FIGURE_ID: Figure(m.FIGURE_ID, "focus-dilution", description, getattr(m, config),
                                m.run) for m, config, description in entries}


def _mean_field() -> dict[str, Figure]:
    from figures import (
        mean_field_control_norm,
        mean_field_density,
        mean_field_energy,
        mean_field_escape,
        mean_field_threshold,
    )

    entries = [
        (mean_field_density, "DensityConfig",
         "token density over depth, W = 0 vs trained FFN, with the escape onset"),
        (mean_field_control_norm, "ControlNormConfig",
         "||W_t|| over depth for several lambda, linear response and e^{-kappa(T-t)}"),
        (mean_field_energy, "EnergyConfig",
         "F_tau and r_2 over depth, W = 0 vs trained, with the dissipation identity"),
        (mean_field_escape, "EscapeConfig",
         "escape against lambda (Gramian/lambda law, saturation) and terminal width vs kappa"),
        (mean_field_threshold, "ThresholdConfig",
         "clustering onset r_1 vs tau/tau_c with tau_c = I_1(beta)/beta, mode-1 growth rate"),
    ]
    return {m.FIGURE_ID: Figure(m.FIGURE_ID, "mean-field", description, getattr(m, config),
                                m.run) for m, config, description in entries}


def comparisons() -> dict[str, tuple[type, Callable]]:
    """``stagewise compare NAME``: (config type, run) of each predicted-vs-measured comparison."""
    from figures import compare_focus_dilution, compare_incremental

    return {"incremental": (compare_incremental.CompareConfig, compare_incremental.run),
            "focus-dilution": (compare_focus_dilution.CompareConfig, compare_focus_dilution.run)}


def all_figures() -> dict[str, Figure]:
    return {**_incremental_clustering_emergence(), **_focus_dilution(), **_mean_field()}
