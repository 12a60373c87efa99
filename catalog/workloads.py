"""The workload registry: one entry per public workload page, all sharing one skeleton.

Each workload says which GPUs suit it, which table columns matter for it, and carries its
own text (intro, "what matters" sections, FAQ), written for this site in English and
translated in locale/.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from django.utils.functional import Promise
from django.utils.translation import gettext_lazy as _

from .fit import Method
from .models import GpuModel


class Column(StrEnum):
    MEMORY = "memory"
    MEMORY_TYPE = "memory_type"
    BANDWIDTH = "bandwidth"
    BF16 = "bf16"
    FP64 = "fp64"
    QLORA = Method.QLORA.value
    LORA16 = Method.LORA16.value
    FULL = Method.FULL.value
    INFERENCE16 = Method.INFERENCE16.value
    INFERENCE4 = Method.INFERENCE4.value
    PRICE = "price"


COLUMN_LABELS: dict[Column, Promise] = {
    Column.MEMORY: _("Memory"),
    Column.MEMORY_TYPE: _("Memory type"),
    Column.BANDWIDTH: _("Bandwidth"),
    Column.BF16: _("BF16 tensor (dense)"),
    Column.FP64: _("FP64"),
    Column.QLORA: _("Largest model, QLoRA"),
    Column.LORA16: _("Largest model, LoRA 16-bit"),
    Column.FULL: _("Largest model, full fine-tuning"),
    Column.INFERENCE16: _("Largest model, 16-bit inference"),
    Column.INFERENCE4: _("Largest model, 4-bit inference"),
    Column.PRICE: _("Lowest price per GPU-hour"),
}


@dataclass(frozen=True)
class Section:
    title: Promise
    paragraphs: tuple[Promise, ...]


@dataclass(frozen=True)
class Question:
    question: Promise
    answer: Promise


@dataclass(frozen=True)
class Workload:
    slug: str
    nav_title: Promise
    title: Promise
    meta_description: Promise
    intro: tuple[Promise, ...]
    columns: tuple[Column, ...]
    suits: Callable[[GpuModel], bool]
    sections: tuple[Section, ...]
    faq: tuple[Question, ...]
    methods: tuple[Method, ...] = field(default=())

    def suitable(self, gpus: list[GpuModel]) -> list[GpuModel]:
        return [gpu for gpu in gpus if self.suits(gpu)]


def _any_gpu(gpu: GpuModel) -> bool:
    return True


FINE_TUNING = Workload(
    slug="fine-tuning",
    nav_title=_("Fine-tuning"),
    title=_("GPUs for fine-tuning open models"),
    meta_description=_(
        "Which GPU fits your LoRA or QLoRA fine-tune: the largest base model per GPU, "
        "memory and bandwidth side by side, and the lowest live price per GPU-hour."
    ),
    intro=(
        _(
            "Fine-tuning adapts an open model such as Llama, Mistral or Qwen to your own data. "
            "With LoRA and QLoRA you train small adapter matrices instead of every weight, so a "
            "single GPU is often enough, and memory decides which base model you can use."
        ),
        _(
            "The table shows, for every GPU on the exchange, the largest base model that fits "
            "for QLoRA and for LoRA in 16-bit, its memory bandwidth, and the cheapest live offer "
            "right now. Pick the smallest GPU that fits your model with room to spare."
        ),
    ),
    columns=(Column.MEMORY, Column.BANDWIDTH, Column.QLORA, Column.LORA16, Column.PRICE),
    suits=_any_gpu,
    methods=(Method.QLORA, Method.LORA16),
    sections=(
        Section(
            title=_("LoRA or QLoRA: memory per parameter"),
            paragraphs=(
                _(
                    "LoRA keeps the base model in 16-bit precision: about 2.5 bytes of GPU memory "
                    "per parameter once adapters, their optimiser state and overheads are counted. "
                    "QLoRA stores the base weights in 4-bit and needs about 1 byte per parameter, "
                    "so the same GPU holds a model two and a half times larger."
                ),
                _(
                    "QLoRA costs a little quality headroom and some speed; LoRA in 16-bit is the "
                    "simpler choice when the model fits."
                ),
            ),
        ),
        Section(
            title=_("Sequence length, batch size and gradient checkpointing"),
            paragraphs=(
                _(
                    "Activations grow with sequence length and batch size. Long contexts can need "
                    "more memory than the weights themselves, which is why our figures keep a "
                    "fifth of the GPU's memory free."
                ),
                _(
                    "Gradient checkpointing recomputes activations instead of storing them: it "
                    "trades about a third more compute time for a large cut in memory, and often "
                    "lets a longer context fit on the same GPU."
                ),
            ),
        ),
        Section(
            title=_("Start with one GPU"),
            paragraphs=(
                _(
                    "Most LoRA and QLoRA runs fit on one GPU. Begin there, measure tokens per "
                    "second and memory use on a short run, and add GPUs only when a single one is "
                    "too slow for your deadline. Spreading a model over several GPUs adds "
                    "communication and configuration work."
                ),
            ),
        ),
    ),
    faq=(
        Question(
            question=_("Which GPU should I rent to fine-tune a 7B model?"),
            answer=_(
                "A 24 GB GPU such as the RTX 4090 fits a 7B model with LoRA in 16-bit and up to "
                "about 15B with QLoRA. If you need long contexts or larger batches, a 48 GB GPU "
                "gives the headroom."
            ),
        ),
        Question(
            question=_("Is QLoRA slower than LoRA?"),
            answer=_(
                "Usually somewhat, because the 4-bit weights are dequantised on the fly at every "
                "step. In exchange it needs far less memory, so it can run on a smaller and "
                "cheaper GPU, which often makes the whole run cost less."
            ),
        ),
        Question(
            question=_("When do I need full fine-tuning?"),
            answer=_(
                "When you change the model deeply: a new language, a new domain with its own "
                "vocabulary, or continued pre-training. Full fine-tuning needs about 16 bytes per "
                "parameter, so beyond small models it means several data-centre GPUs."
            ),
        ),
        Question(
            question=_("How do I rent a GPU here?"),
            answer=_(
                "Create an account, top up your prepaid balance in euros, dollars or pounds, and "
                "buy GPU hours at the best offer or place a bid at your own price. You are charged "
                "by the hour and can stop at any time."
            ),
        ),
    ),
)

TRAINING = Workload(
    slug="training",
    nav_title=_("Training"),
    title=_("GPUs for training large language models"),
    meta_description=_(
        "Data-centre GPUs with HBM for pre-training and full fine-tuning: memory, bandwidth, BF16 "
        "throughput, the largest model per GPU and live prices."
    ),
    intro=(
        _(
            "Pre-training a language model, or fine-tuning every weight of an existing one, is the "
            "most demanding job you can give a GPU. Each parameter needs its weights, its gradient "
            "and its optimiser state in memory at the same time, and a run is measured in GPU-days "
            "or GPU-months of dense matrix arithmetic. This page therefore lists only data-centre "
            "GPUs with high-bandwidth memory (HBM)."
        ),
        _(
            "The table compares memory size and type, memory bandwidth, dense BF16 tensor "
            "throughput, the largest model that one GPU can fully fine-tune, and the cheapest live "
            "offer. Beyond a few billion parameters the work is spread over several GPUs, so read "
            "the figures as the building blocks of a larger setup."
        ),
    ),
    columns=(
        Column.MEMORY,
        Column.MEMORY_TYPE,
        Column.BANDWIDTH,
        Column.BF16,
        Column.FULL,
        Column.PRICE,
    ),
    suits=lambda gpu: gpu.has_hbm,
    methods=(Method.FULL,),
    sections=(
        Section(
            title=_("Memory: 16 bytes per parameter before activations"),
            paragraphs=(
                _(
                    "Mixed-precision training with the Adam optimiser keeps, for every parameter, "
                    "2 bytes of BF16 weights, 2 bytes of gradients and 12 bytes of optimiser state "
                    "in FP32: a master copy of the weight and two running averages. That makes "
                    "about 16 bytes per parameter, so a 7B model needs around 112 GB before a "
                    "single activation is stored."
                ),
                _(
                    "This is why the full fine-tuning column stays small even on an 80 GB GPU. "
                    "Sharding weights, gradients and optimiser state across GPUs with FSDP or "
                    "DeepSpeed ZeRO divides that total by the number of GPUs, and gradient "
                    "checkpointing keeps activations in check, at the cost of extra communication "
                    "and recomputation."
                ),
            ),
        ),
        Section(
            title=_("BF16 throughput and multi-GPU scaling"),
            paragraphs=(
                _(
                    "Training time is set by arithmetic. A common rule of thumb puts the work at "
                    "about six floating-point operations per parameter for every training token, "
                    "so doubling either the model or the dataset doubles the compute. The BF16 "
                    "column gives each GPU's dense tensor peak; real runs reach only part of it, "
                    "depending on model size, sequence length and software. BF16 keeps the range "
                    "of FP32, so unlike FP16 it needs no loss scaling."
                ),
                _(
                    "Once a job spans several GPUs, they exchange gradients or activations at "
                    "every step. Inside a server, NVLink between SXM GPUs is far faster than PCIe; "
                    "between servers, InfiniBand or fast Ethernet carries the traffic. A slow link "
                    "leaves expensive GPUs waiting, so know how the GPUs you rent are connected "
                    "before you plan a multi-GPU run."
                ),
            ),
        ),
        Section(
            title=_("HBM bandwidth keeps the tensor cores busy"),
            paragraphs=(
                _(
                    "HBM stacks memory right next to the GPU chip on a very wide bus. The GPUs on "
                    "this page move between two and almost five terabytes per second, well above "
                    "the graphics cards with GDDR memory. Normalisation layers, activation "
                    "functions, optimiser updates and attention over long sequences move a lot of "
                    "data for little arithmetic, so bandwidth decides how much of the tensor peak "
                    "you actually get."
                ),
                _(
                    "These GPUs also have ECC memory and are designed for continuous full load in "
                    "servers, which matters when one failed step can cost hours of progress. Save "
                    "checkpoints regularly all the same."
                ),
            ),
        ),
    ),
    faq=(
        Question(
            question=_("How many GPUs do I need to pre-train a 7B model?"),
            answer=_(
                "Memory sets the minimum: at about 16 bytes per parameter, a 7B model needs "
                "roughly 112 GB for weights, gradients and optimiser state, so at least two 80 GB "
                "GPUs with sharded state, or one H200 with little room to spare. Compute sets the "
                "practical number: at about six operations per parameter per token, training on a "
                "trillion tokens takes tens of thousands of GPU-hours. That is why pre-training "
                "usually runs on several servers of eight GPUs each."
            ),
        ),
        Question(
            question=_("Should I choose the H100 or the A100?"),
            answer=_(
                "Both have 80 GB, but the H100 SXM has about three times the A100's dense BF16 "
                "peak, about 60 percent more memory bandwidth and FP8 support through its "
                "Transformer Engine. Real speed-ups are smaller than the peak ratio and depend on "
                "your model and software. Run a short benchmark on each and compare the cost of "
                "the whole run, not the price per hour."
            ),
        ),
        Question(
            question=_("What does the H200's extra memory buy me?"),
            answer=_(
                "The H200 has the same Hopper compute as the H100, but 141 GB of HBM3e instead of "
                "80 GB and more bandwidth. For training that means larger batches or longer "
                "sequences per GPU, less sharding and recomputation, and room for bigger models on "
                "the same number of GPUs. It pays off most when memory, not arithmetic, is what "
                "limits your run."
            ),
        ),
        Question(
            question=_("How do I rent training GPUs here?"),
            answer=_(
                "Create an account and top up your prepaid balance in euros, dollars or pounds. "
                "Buy GPU hours at the best current offer or place a bid at your own price; you are "
                "charged by the hour for as long as you use them. You can stop at any time, so "
                "save checkpoints and run a long job in stages if that suits your budget."
            ),
        ),
    ),
)

INFERENCE = Workload(
    slug="inference",
    nav_title=_("Inference"),
    title=_("GPUs for LLM inference"),
    meta_description=_(
        "Which GPU serves your open LLM: the largest model per GPU in 16-bit and 4-bit, memory "
        "bandwidth for token speed, and the lowest live price per GPU-hour."
    ),
    intro=(
        _(
            "Serving an open model such as Llama, Mistral, Qwen or Gemma comes down to two "
            "questions: does the model fit in GPU memory, and how fast will the tokens come? The "
            "first depends on memory size and on the precision of the weights, the second mostly "
            "on memory bandwidth."
        ),
        _(
            "The table lists every GPU on the exchange with its memory, its bandwidth, the largest "
            "model it can serve in 16-bit and in 4-bit, and the cheapest live offer. A smaller GPU "
            "that holds your model comfortably is often better value than a large one that sits "
            "half empty."
        ),
    ),
    columns=(Column.MEMORY, Column.BANDWIDTH, Column.INFERENCE16, Column.INFERENCE4, Column.PRICE),
    suits=_any_gpu,
    methods=(Method.INFERENCE16, Method.INFERENCE4),
    sections=(
        Section(
            title=_("Token speed is bound by memory bandwidth"),
            paragraphs=(
                _(
                    "To generate each new token, the GPU reads every weight of the model from "
                    "memory once. For a single request that read, not the arithmetic, sets the "
                    "pace, so an upper bound on tokens per second is the bandwidth divided by the "
                    "size of the weights. A 7B model in 16-bit takes about 14 GB; on a GPU with "
                    "1,000 GB/s it cannot produce much more than 70 tokens a second for one user."
                ),
                _(
                    "Reading the prompt, called prefill, works differently: all prompt tokens are "
                    "processed in parallel and the tensor cores do the work. Long prompts "
                    "therefore stretch the time to the first token on GPUs with less compute, "
                    "while bandwidth governs the steady stream of tokens that follows."
                ),
            ),
        ),
        Section(
            title=_("Weights, KV cache and quantisation"),
            paragraphs=(
                _(
                    "In 16-bit precision each parameter takes 2 bytes. Our figures add 0.4 bytes "
                    "per parameter for the key-value (KV) cache of a handful of concurrent "
                    "requests with about 4,000 tokens of context each, so 2.4 bytes per parameter "
                    "in all, and they keep a fifth of the GPU's memory free for the CUDA context "
                    "and working buffers."
                ),
                _(
                    "Quantising the weights to 4 bits cuts them to half a byte per parameter; with "
                    "0.25 bytes for the cache that makes 0.75 bytes, so the same GPU serves a "
                    "model about three times larger. Good 4-bit formats such as AWQ, GPTQ or 4-bit "
                    "GGUF lose little quality on most tasks, and 8-bit sits in between, but test "
                    "on your own prompts: small models and tasks like maths or code can suffer "
                    "more."
                ),
            ),
        ),
        Section(
            title=_("Batching, concurrency and the KV cache"),
            paragraphs=(
                _(
                    "Because every step reads all the weights anyway, a GPU can advance many "
                    "requests in the same step for little extra time. Serving engines such as "
                    "vLLM, SGLang or TensorRT-LLM batch incoming requests continuously, which "
                    "multiplies total throughput at the cost of slightly slower tokens for each "
                    "user."
                ),
                _(
                    "The limit is the KV cache: every active request keeps keys and values for all "
                    "its tokens in GPU memory, and that grows with context length and with the "
                    "number of users. If you expect long contexts or many users at once, choose a "
                    "GPU with memory well beyond the weights, or use a quantised KV cache if your "
                    "engine supports one."
                ),
            ),
        ),
    ),
    faq=(
        Question(
            question=_("Which GPU do I need to serve a 70B model?"),
            answer=_(
                "In 4-bit a 70B model needs about 53 GB for weights and cache, which fits on one "
                "80 GB GPU such as the A100 or H100, or on the 96 GB RTX PRO 6000 Blackwell. In "
                "16-bit it needs about 170 GB, so you spread it over two H200s or four 80 GB GPUs "
                "with tensor parallelism."
            ),
        ),
        Question(
            question=_("Is a 24 GB GPU enough for a 7B or 8B model?"),
            answer=_(
                "Yes. An RTX 4090 serves an 8B model in 16-bit with a modest KV cache, and in "
                "4-bit it holds models up to about 25B. For many concurrent users or long "
                "contexts, a 48 GB GPU leaves more room for the cache."
            ),
        ),
        Question(
            question=_("Why can a GPU with less memory generate tokens faster?"),
            answer=_(
                "Because token speed follows bandwidth, not capacity. The 32 GB RTX 5090 moves "
                "about 1.8 TB/s, more than twice the bandwidth of the 48 GB RTX A6000, so for a "
                "model that fits on both it produces tokens faster. Check that the model fits "
                "first, then compare the bandwidth column."
            ),
        ),
        Question(
            question=_("How do I rent a GPU for inference here?"),
            answer=_(
                "Top up a prepaid balance in euros, dollars or pounds, then buy GPU hours at the "
                "best offer or bid the price you are willing to pay. You are charged by the hour, "
                "so you can run a short load test first and stop at any time."
            ),
        ),
    ),
)

IMAGE_VIDEO = Workload(
    slug="image-video",
    nav_title=_("Image & video"),
    title=_("GPUs for image and video generation"),
    meta_description=_(
        "GPUs for Stable Diffusion, FLUX and video models: memory, bandwidth and BF16 throughput "
        "from 24 GB cards to 80 GB GPUs, with live prices."
    ),
    intro=(
        _(
            "Diffusion models create an image by starting from noise and refining it over many "
            "steps, running the whole network at each step. Open image models such as Stable "
            "Diffusion and FLUX, and the newer open video models, run on a single GPU, from a 24 "
            "GB graphics card up to an 80 GB data-centre GPU."
        ),
        _(
            "The table lists those GPUs with their memory, bandwidth, dense BF16 tensor throughput "
            "and the cheapest live offer. Memory decides which model, resolution and clip length "
            "you can run; tensor throughput decides how many images or seconds of video you get "
            "per hour."
        ),
    ),
    columns=(Column.MEMORY, Column.BANDWIDTH, Column.BF16, Column.PRICE),
    suits=lambda gpu: gpu.memory_gb <= 80,
    methods=(),
    sections=(
        Section(
            title=_("Memory sets the model, resolution and clip length"),
            paragraphs=(
                _(
                    "The weights come first: a 12-billion-parameter image model such as FLUX.1 "
                    "takes about 24 GB in 16-bit, before its text encoders and the working memory "
                    "of the generation. On a 24 GB card such models run with 8-bit weights or with "
                    "parts moved to system memory between stages, which works but costs speed."
                ),
                _(
                    "Video multiplies the working memory: the model processes the frames of a clip "
                    "together, so memory use grows with resolution and with the number of frames. "
                    "For longer or sharper clips, a 48 GB or 80 GB GPU avoids tiling and "
                    "offloading tricks and keeps the workflow simple."
                ),
            ),
        ),
        Section(
            title=_("Throughput: tensor cores before bandwidth"),
            paragraphs=(
                _(
                    "Unlike text generation, diffusion is mostly compute-bound: each step pushes a "
                    "large block of latent pixels through the network, which keeps the tensor "
                    "cores busy, so the BF16 column predicts speed better than the bandwidth "
                    "column does. Doubling the number of steps roughly doubles the time per image."
                ),
                _(
                    "Where the manufacturer publishes no dense BF16 figure, the cell is empty. "
                    "That says nothing about speed, so benchmark your own workflow on a short "
                    "rental before you start a long batch job."
                ),
            ),
        ),
        Section(
            title=_("Several small GPUs or one large one"),
            paragraphs=(
                _(
                    "Generation splits easily across GPUs: each one works on its own prompts, so "
                    "four 24 GB cards produce about four times the images of one. When your model "
                    "fits on a graphics card, several of them are often cheaper per image than a "
                    "single data-centre GPU."
                ),
                _(
                    "Training LoRA adapters or fine-tuning an image model needs more memory than "
                    "generating with it. A 24 GB card is comfortable for adapters on SDXL-sized "
                    "models, while the larger image and video models benefit from 48 GB or more."
                ),
            ),
        ),
    ),
    faq=(
        Question(
            question=_("Which GPU should I rent for Stable Diffusion XL?"),
            answer=_(
                "SDXL runs comfortably on every GPU listed here, including the 24 GB RTX 4090. "
                "More memory helps only for large batches, very high resolutions or training; for "
                "plain generation, pick the card with the best throughput for its price."
            ),
        ),
        Question(
            question=_("Can I run FLUX on a 24 GB GPU?"),
            answer=_(
                "Yes, with some care. The 12-billion-parameter model takes about 24 GB in 16-bit "
                "on its own, so on a 24 GB card it usually runs with 8-bit weights or with the "
                "text encoders offloaded. A 48 GB GPU holds the model and its text encoders in "
                "16-bit with room to spare."
            ),
        ),
        Question(
            question=_("Do I need an 80 GB GPU for video generation?"),
            answer=_(
                "Not always. Short, low-resolution clips from the smaller open video models fit on "
                "24 GB cards, especially with offloading. The largest open video models and long, "
                "high-resolution clips are where 48 GB and 80 GB GPUs save time and avoid "
                "out-of-memory errors."
            ),
        ),
        Question(
            question=_("How do I rent a GPU for image generation here?"),
            answer=_(
                "Top up a prepaid balance in euros, dollars or pounds, choose a GPU and buy hours "
                "at the best offer or bid your own price. You are charged by the hour and can stop "
                "at any time, which suits batch jobs: rent for the run, then let the GPU go."
            ),
        ),
    ),
)

RENDERING = Workload(
    slug="rendering",
    nav_title=_("Rendering"),
    title=_("GPUs for 3D rendering and visual effects"),
    meta_description=_(
        "GPUs with ray-tracing cores for Blender Cycles, V-Ray, Redshift, Octane and Unreal "
        "Engine: memory, bandwidth and the lowest live price per GPU-hour."
    ),
    intro=(
        _(
            "GPU renderers trace millions of light rays through a scene to produce photoreal "
            "frames for film, visual effects, product shots and architecture. Cards with dedicated "
            "ray-tracing cores speed that work up considerably, so this page lists only GPUs that "
            "have them."
        ),
        _(
            "Data-centre GPUs such as the A100, H100 and H200 have no ray-tracing cores and no "
            "display outputs; they are built for AI and simulation instead. The table compares the "
            "graphics and workstation cards on the exchange by memory, memory type, bandwidth and "
            "the cheapest live offer."
        ),
    ),
    columns=(Column.MEMORY, Column.MEMORY_TYPE, Column.BANDWIDTH, Column.PRICE),
    suits=lambda gpu: gpu.ray_tracing_cores,
    methods=(),
    sections=(
        Section(
            title=_("Ray-tracing cores and your renderer"),
            paragraphs=(
                _(
                    "Ray-tracing cores do the costliest part of path tracing in hardware: finding "
                    "which triangle each ray hits by walking the scene's bounding volume hierarchy "
                    "(BVH). Blender Cycles, V-Ray GPU, Redshift, Octane and Arnold GPU use them "
                    "through NVIDIA OptiX, and real-time engines such as Unreal Engine use them "
                    "for hardware ray tracing."
                ),
                _(
                    "Each generation of ray-tracing cores is faster than the last, so an Ada "
                    "Lovelace or Blackwell card usually renders a frame sooner than an Ampere card "
                    "with the same memory. Tensor cores help too: the AI denoisers in most "
                    "renderers run on them and let you stop at fewer samples per pixel."
                ),
            ),
        ),
        Section(
            title=_("The scene has to fit in memory"),
            paragraphs=(
                _(
                    "A GPU renders fastest when geometry, textures, the acceleration structure and "
                    "the frame buffers all sit in its own memory. Production scenes with "
                    "high-resolution textures, dense geometry or large volumes can need tens of "
                    "gigabytes, which is where 48 GB and 96 GB cards earn their price over a 24 GB "
                    "one."
                ),
                _(
                    "Some renderers can page data from system memory when a scene does not fit, "
                    "but rendering then slows down markedly, and others stop with an out-of-memory "
                    "error. Render a test frame and check the peak memory use before you book many "
                    "hours."
                ),
            ),
        ),
        Section(
            title=_("Frames in parallel, and the licence"),
            paragraphs=(
                _(
                    "Final-frame rendering scales almost perfectly: give each GPU its own frames "
                    "and four GPUs finish a sequence in about a quarter of the time. In most "
                    "renderers memory does not add up across GPUs, though; each one must hold the "
                    "whole scene, so choose the card by scene size and the number of cards by "
                    "deadline."
                ),
                _(
                    "Check that your renderer's licence allows use on remote or cloud machines, "
                    "and how many GPUs or machines it covers. Some renderers are free, while "
                    "others are licensed per machine or per user."
                ),
            ),
        ),
    ),
    faq=(
        Question(
            question=_("Which GPU is best for Blender Cycles?"),
            answer=_(
                "Every card listed here runs Cycles with OptiX. For scenes that fit in 24 or 32 "
                "GB, an RTX 4090 or RTX 5090 often gives the most speed for the money; for heavier "
                "scenes, the 48 GB L40S or RTX 6000 Ada, or the 96 GB RTX PRO 6000 Blackwell, give "
                "the room."
            ),
        ),
        Question(
            question=_("Why are the A100, H100 and H200 not listed?"),
            answer=_(
                "They have no ray-tracing cores, so renderers cannot use the hardware that makes "
                "GPU ray tracing fast, and they are not designed for graphics work. They are "
                "excellent for AI training and simulation, and a poor buy for rendering."
            ),
        ),
        Question(
            question=_("Does a workstation card render faster than a GeForce card?"),
            answer=_(
                "Not necessarily. Workstation cards such as the RTX 6000 Ada offer more memory, "
                "ECC and certified drivers, while a GeForce card of the same generation can be "
                "about as fast on scenes that fit in its memory. Pay for the workstation card when "
                "you need its memory."
            ),
        ),
        Question(
            question=_("How do I rent a rendering GPU here?"),
            answer=_(
                "Top up your prepaid balance in euros, dollars or pounds, then buy GPU hours at "
                "the best offer or bid your own price. You are charged by the hour and can stop at "
                "any time, so you can rent several GPUs for a deadline and release them when the "
                "last frame is done."
            ),
        ),
    ),
)

SCIENTIFIC = Workload(
    slug="scientific",
    nav_title=_("Scientific computing"),
    title=_("GPUs for scientific computing and simulation"),
    meta_description=_(
        "Data-centre GPUs for HPC and simulation: FP64 throughput, HBM memory and bandwidth side "
        "by side, with the lowest live price per GPU-hour."
    ),
    intro=(
        _(
            "Simulation codes in fluid dynamics, weather and climate, structural mechanics, "
            "molecular dynamics and quantum chemistry increasingly run on GPUs, through CUDA, "
            "OpenACC, OpenMP offload or libraries such as cuBLAS and cuFFT. Many of them need "
            "double precision (FP64), and most are limited by how fast data moves rather than by "
            "arithmetic."
        ),
        _(
            "This page lists the data-centre GPUs on the exchange with high-bandwidth memory (HBM) "
            "and strong FP64 units, with their memory, bandwidth, FP64 rate and the cheapest live "
            "offer. Graphics and workstation cards run FP64 at a small fraction of their "
            "single-precision speed and are left out."
        ),
    ),
    columns=(Column.MEMORY, Column.BANDWIDTH, Column.FP64, Column.PRICE),
    suits=lambda gpu: gpu.has_hbm,
    methods=(),
    sections=(
        Section(
            title=_("Double precision: check what your code needs"),
            paragraphs=(
                _(
                    "Codes that solve large, ill-conditioned systems or integrate over long times, "
                    "such as implicit CFD solvers, finite-element analysis and many "
                    "quantum-chemistry methods, rely on FP64 to keep rounding errors under "
                    "control. On the GPUs listed here FP64 runs at half the FP32 rate; graphics "
                    "cards run it at a small fraction, which makes them a poor fit whatever their "
                    "price."
                ),
                _(
                    "Not every scientific code needs it. Many molecular dynamics packages compute "
                    "in mixed precision, and machine-learning surrogates run in BF16 or FP16; if "
                    "yours does, a graphics card from the inference page may do the job for less. "
                    "The FP64 column shows the standard rate without tensor cores; matrix-heavy "
                    "codes can go faster through the FP64 tensor cores of these GPUs."
                ),
            ),
        ),
        Section(
            title=_("Bandwidth decides most simulations"),
            paragraphs=(
                _(
                    "Stencil updates, sparse matrix-vector products, particle methods and FFTs do "
                    "only a few operations for every byte they load, so they run at the speed of "
                    "memory. For such codes the bandwidth column is the best single predictor: the "
                    "H100's 3.35 TB/s against the A100's 2.04 TB/s is a fair first estimate of the "
                    "gain."
                ),
                _(
                    "A quick roofline check tells you which side you are on. Divide the "
                    "floating-point operations of your main kernel by the bytes it moves, and "
                    "compare the result with the GPU's FP64 rate divided by its bandwidth. Below "
                    "that ratio, pay for bandwidth; above it, pay for FP64."
                ),
            ),
        ),
        Section(
            title=_("Memory size and multi-GPU runs"),
            paragraphs=(
                _(
                    "The whole problem has to fit: mesh or grid, fields, matrices and solver "
                    "workspace. With 80 GB on the A100 and H100 and 141 GB on the H200, one GPU "
                    "holds a sizeable problem, and keeping it on one GPU avoids communication "
                    "entirely. All three have ECC memory, which protects long runs against silent "
                    "bit errors."
                ),
                _(
                    "Larger runs split the domain across GPUs with MPI and exchange boundary data "
                    "at every step. Use a CUDA-aware MPI library so data moves directly between "
                    "GPUs, prefer GPUs in the same server connected by NVLink, and measure scaling "
                    "on a few GPUs before you book many."
                ),
            ),
        ),
    ),
    faq=(
        Question(
            question=_("Can I use an RTX 4090 for scientific computing?"),
            answer=_(
                "For single-precision or mixed-precision codes, often yes, and it can be good "
                "value. For FP64 work it is a poor choice: graphics cards run double precision at "
                "a small fraction of their FP32 speed, so a data-centre GPU finishes the same job "
                "many times faster."
            ),
        ),
        Question(
            question=_("A100, H100 or H200 for simulation?"),
            answer=_(
                "The H100 SXM offers about three and a half times the A100's FP64 rate and about "
                "60 percent more bandwidth, so it is the better buy whenever its price premium is "
                "smaller than its speed-up on your code. The H200 has the same compute as the H100 "
                "with 141 GB and about 4.8 TB/s, which helps large and bandwidth-bound problems. "
                "Benchmark your own case on one GPU of each before a long campaign."
            ),
        ),
        Question(
            question=_("Do I need to change my code to run on these GPUs?"),
            answer=_(
                "If it already runs on NVIDIA GPUs through CUDA, OpenACC or OpenMP offload, "
                "usually not: rebuild it for the right architecture (compute capability 8.0 for "
                "the A100, 9.0 for the H100 and H200) and run. CPU-only codes need porting, but "
                "many established packages already ship GPU versions, so check yours first."
            ),
        ),
        Question(
            question=_("How do I rent a GPU for simulation here?"),
            answer=_(
                "Create an account, top up a prepaid balance in euros, dollars or pounds, and buy "
                "GPU hours at the best offer or bid your own price. You are charged by the hour "
                "and can stop at any time; write restart files regularly so a long run can "
                "continue in a later rental."
            ),
        ),
    ),
)

WORKLOADS: tuple[Workload, ...] = (
    FINE_TUNING,
    TRAINING,
    INFERENCE,
    IMAGE_VIDEO,
    RENDERING,
    SCIENTIFIC,
)


def workload_get(slug: str) -> Workload | None:
    return next((workload for workload in WORKLOADS if workload.slug == slug), None)
