/* decode_pipeline_case_study's defaults and usage text: the one place that
 * says what every flag accepts and what it defaults to. */
#include "cs_impl.h"
#include "kernels.h" /* GP_GEMM_TUNE_MAX_CANDIDATES for the usage text */

#include <string.h>

#include "gp_model.h"
#include "gp_queues.h"

void gp_cs_default_options(gp_cs_options *o)
{
    memset(o, 0, sizeof *o);
    /* splits: none listed, splits_given false: seq plus the default set */
    static const char *wl[] = { "small", "large" };
    for (int i = 0; i < 2; i++) {
        gp_cs_workload *w = &o->workloads[i];
        cs_workload_preset(wl[i], &w->B, &w->C);
        snprintf(w->label, sizeof w->label, "%s", wl[i]);
    }
    o->n_workloads = 2;
    o->micro[0] = 1;
    o->micro[1] = 2;
    o->n_micro = 2;
    o->depths[0] = GP_RING_DEFAULT_DEPTH;
    o->n_depths = 1;
    o->placements[0] = GP_PLACE_QKVO_A;
    o->n_placements = 1;
    o->fill_drain = GP_FILL_DRAIN_WHOLE;
    o->attn_kernel = GP_ATTN_KERNEL_AUTO;
    o->attn_kv_evict_first = true;
    o->dtype = GP_DTYPE_AUTO;
    snprintf(o->model, sizeof o->model, "%s", GP_DEFAULT_PRESET);
    o->steps = 8;
    o->warmup = true;
    o->warmup_steps = 3;
    o->repeat = 5;
    o->rebalance = GP_REBALANCE_OFF;
    snprintf(o->tuning_out, sizeof o->tuning_out, "tuning.json");
    o->seed = 0;
    o->progress = -1;
}

void gp_cs_usage(FILE *f)
{
    fputs(
        "Usage: " CS_PROG " [options]\n"
        "\n"
        "Runs decode steps with attention and FFN on disjoint SM partitions (A:F) of the\n"
        "GPU, over every combination of the listed splits, workloads, micro-batch counts\n"
        "and queue depths, and reports ms/step, tokens/s and the pipeline statistics of\n"
        "each beside the sequential engine on all SMs (the seq row, always run).\n"
        "\n"
        "Configurations (lists are comma-separated, each entry at most once):\n"
        "  --sm-splits LIST     A:F attention:FFN SMs (A + F = all SMs of the GPU), A (F\n"
        "                       gets the rest), seq (the sequential reference; run\n"
        "                       anyway), sweep (every valid split at the GPU's partition\n"
        "                       granularity). At most 64 entries.\n"
        "                       Default: seq and A = 40, 56, 72 with F the rest on an\n"
        "                       H100 (132 SMs in partitions of 8, 12 remainder SMs on F);\n"
        "                       elsewhere the same shares of the GPU (30%, 42%, 55%)\n"
        "                       rounded to its granularity.\n"
        "  --workload LIST      small (8:1024), large (1024:384) or B:C: B sequences with\n"
        "                       C tokens cached each, B 1..65536, C 1..1048576, at most 16.\n"
        "                       The presets are sized for the H100 and shrink on GPUs\n"
        "                       with fewer SMs or less memory (the report says how);\n"
        "                       B:C runs as given. Default: small,large.\n"
        "  --micro-batches LIST micro-batches M per step, 1..4. Default: 1,2.\n"
        "  --queue-depth LIST   slots of each layer's ring, a power of two 2..4096 (holds\n"
        "                       depth - 1 payloads), at most 8 entries. Default: 4.\n"
        "  --placement LIST     where each layer's QKV and O projections run: qkvo-a (in\n"
        "                       the attention stage) or qkvo-f (in the FFN stage, so\n"
        "                       the attention partition runs no GEMM). Default: qkvo-a.\n"
        "  --fill-drain MODE    where the stages nothing overlaps run (the embedding and\n"
        "                       first attention stage, the last FFN stage and LM head):\n"
        "                       whole (every SM) or partition (A and F). Default: whole.\n"
        "  --context MODE       how each workload's C cached tokens are made: random\n"
        "                       (random K/V, instant) or prefill (a real batched prefill\n"
        "                       of C random tokens per sequence, once per workload; each\n"
        "                       repeat decodes again from it). Default: random.\n"
        "  --model NAME|DIR     a preset (tiny, llama3.2-1b, llama3-8b, llama3.1-8b, llama3-70b) with\n"
        "                       synthetic weights, or a Hugging Face checkpoint directory\n"
        "                       (config.json + safetensors). Default: llama3-8b.\n"
        "  --vram-budget SIZE   weights beyond VRAM: every weight in pinned host memory\n"
        "                       (host memory for the whole model is needed), at most SIZE\n"
        "                       bytes of them on the GPU (bytes, or K, M, G, T and KiB..TiB\n"
        "                       binary, KB..TB decimal, any case: 512M, 4GiB, 4GB), the\n"
        "                       embedding/head group kept there and the layer\n"
        "                       groups streamed with prefetch. Every row, seq included,\n"
        "                       runs eager (CUDA graphs would bake one step's addresses);\n"
        "                       the reports give the budget and per row the GB streamed,\n"
        "                       copy GB/s and the compute's stalls per step, the trace a\n"
        "                       copy track. Refused below the model's least budget (the\n"
        "                       head and three consecutive layer groups, as a split step\n"
        "                       holds them), above the GPU's free memory, and with\n"
        "                       --autotune. Default: every weight resident on the GPU.\n"
        "\n"
        "Measurement:\n"
        "  --steps N            timed steps per repeat, 1..100000. Default: 8.\n"
        "  --warmup[=N]         run N untimed steps first, 1..1000 (default: on, N = 3).\n"
        "  --no-warmup          time from the first step.\n"
        "  --repeat N           repeats per configuration, 1..1000; ms/step is the median\n"
        "                       over repeats of each repeat's median step. Default: 5.\n"
        "  --rebalance POLICY   off, ratio or model: let the rebalancer move the split\n"
        "                       between steps. Default: off.\n"
        "  --gemm-tune N        time the first N (1.." CS_STR(GP_GEMM_TUNE_MAX_CANDIDATES) ") of cuBLASLt's candidates for each\n"
        "                       layer GEMM on the partition that runs it, before a step\n"
        "                       shape is captured, and keep the fastest; the seq row too.\n"
        "                       Timing-based: runs may pick differently. Default: 0 (the\n"
        "                       heuristic's first pick).\n"
        "  --attn-kernel NAME   decode-attention kernel: auto (the rule of\n"
        "                       gp_decode_attn_choose), cudacore, cudacore_pipe, mma or\n"
        "                       stream (where it serves a call; the rule elsewhere). The\n"
        "                       kernel each row ran is in the report. Default: auto.\n"
        "  --attn-warps-cap N   streaming kernel: at most N warps per SM, an even 2.." CS_STR(GP_ATTN_STREAM_WARPS_CAP_MAX) "\n"
        "                       (a smaller HBM appetite beside a co-running FFN side);\n"
        "                       0: no cap. Default: 0.\n"
        "  --attn-kv-evict on|off\n"
        "                       streaming kernel: mark its K/V copies L2 evict_first, so\n"
        "                       K/V read once does not displace what the GEMMs reuse.\n"
        "                       Default: on.\n"
        "  --dtype auto|bf16|fp16\n"
        "                       the engine's 16-bit type (weights, activations, KV cache;\n"
        "                       float32 accumulation). auto: a checkpoint's own (bf16 for\n"
        "                       an fp32 one), bf16 for presets. The report names the dtype\n"
        "                       that ran. Default: auto.\n"
        "  --seed N             seed of the synthetic weights and tokens, 0..2^64-1.\n"
        "                       Default: 0.\n"
        "\n"
        "Tuning:\n"
        "  --profile FILE|none  the best configuration known for the GPU, run as an extra\n"
        "                       row per workload: FILE's measurement where FILE names this\n"
        "                       GPU (name, SM count, compute capability) and measured the\n"
        "                       workload (row tagged best-known), else FILE's cold-start\n"
        "                       rule (tagged cold-start rule); none where either is seq.\n"
        "                       GEMMs are tuned as the row was measured (seq too) unless\n"
        "                       --gemm-tune is given. Default: case_studies/profiles/\n"
        "                       h100-sxm.json when neither --sm-splits, --tuning nor\n"
        "                       --autotune is given; none: no such row.\n"
        "  --tuning FILE        follow a profile written by --autotune: its best measured\n"
        "                       configuration for a workload it measured, else its\n"
        "                       cold-start rule (an extra row, tagged tuned or rule).\n"
        "                       Not with --profile FILE.\n"
        "  --autotune           measure every valid split (unless --sm-splits is given)\n"
        "                       and write a tuning profile.\n"
        "  --tuning-out FILE    where --autotune writes it. Default: tuning.json.\n"
        "\n"
        "Output (a markdown table always goes to stdout, ending with one line per\n"
        "workload naming the fastest row and its speedup over seq; seq when it wins):\n"
        "  --json FILE          everything: rows, raw samples, rebalancer decisions, run\n"
        "                       metadata, the winners.\n"
        "  --csv FILE           one header line and one line per configuration (the\n"
        "                       winner column marks each workload's fastest).\n"
        "  --trace FILE         Chrome/Perfetto trace of one step per configuration\n"
        "                       (open in ui.perfetto.dev or chrome://tracing).\n"
        "  --svg FILE           tokens/s against attention SMs, per workload and M.\n"
        "  --stats              the pipeline statistics report of every pipelined\n"
        "                       configuration (per-layer attention and FFN ms, A->F\n"
        "                       MB/token, backlogs, host waits, idle) before the table.\n"
        "  --progress           progress lines on stderr; --no-progress: none\n"
        "                       (default: when stderr is a terminal).\n"
        "  -h, --help           this text.\n"
        "\n"
        "Every flag may be given once. Exit status 2: a bad command line (or a workload\n"
        "or --vram-budget the GPU cannot hold); 1: no GPU, or a configuration or report\n"
        "failed; 130 or 143: stopped by SIGINT or SIGTERM after the configuration in\n"
        "progress, with the reports holding the rows that finished.\n",
        f);
}

