"""导览的全部中文文本（键与 :mod:`~tui.tour.strings_en` 完全相同）。"""

from __future__ import annotations

STRINGS: dict[str, str] = {
    "yes": "是",
    "no": "否",
    "guess.title": "先猜一猜。",
    "stage.tokenize": "1 切分 token",
    "stage.batch": "2 组成 batch",
    "stage.decode": "3 decode",
    "stage.logits": "4 logits",
    "stage.sample": "5 采样",
    "stage.detok": "6 结束？/ 还原文字",
    "stage.feed": "7 回送",
    "pane.tokens": "在应用里：第 1 栏，tokens。",
    "pane.batch": "在应用里：第 2 栏，batch。",
    "pane.timeline": "在应用里：第 3 栏，decode 调用的时间线。",
    "pane.logits": "在应用里：右上方的 logits 面板。",
    "pane.text": "在应用里：文本面板，每个片段落在那里。",
    "pane.kv": "在应用里：第 4 栏，KV cache。",
    "pane.mask": "在应用里：第 5 栏，因果掩码。",
    "pane.attention": "在应用里：第 6 栏，注意力权重（按 a 打开捕获）。",
    "pane.cache": "在应用里：第 0 栏，缓存面板。",
    "pane.memory": "在应用里：第 9 栏，KV 内存。",
    "loop.title": "循环转一圈",
    "loop.intro": (
        "模型从不一次写出整句话。它给每一个可能的下一个 token 打分，选出一个，再把它当作输入送回去。"
        "现在就用你的提示词跑这一圈：\n"
        "  {prompt}\n"
        "每一页点亮七个步骤中的一个，并写出背后是哪个 llama.cpp 调用。"
    ),
    "loop.1": (
        "这段文字变成了 {n} 个 token id。模型看到的只有这些数字。\n  片段：{pieces}\n  id：  {ids}"
    ),
    "loop.2": (
        "这 {n} 个 id 装进同一个 batch：位置从 0 到 {last}，都属于序列 0；"
        "只有最后一行要求输出 logits，因为只需要它后面的那个 token。"
    ),
    "loop.3": (
        "一次 llama_decode 让整个 batch 走完所有层。每个 token 都留下自己的 key 和 value："
        "KV cache 现在有 {cells} 个单元。"
    ),
    "loop.4": (
        "最后一行返回 {n_vocab:,} 个数，词表里每一项一个分数。到这一步，哪个 token 会被选中还没有决定。"
        "分数最高的是 id {top1}。"
    ),
    "loop.5": "采样器链把分数变成一个选择。导览用贪心采样，所以取最高的：id {id}，{piece!r}。",
    "loop.6": (
        "它是结束生成的 token 吗？{eog}。接着把 id 还原成字节：{piece!r}。"
        "这就是你会看到出现在屏幕上的文字。"
    ),
    "loop.7": (
        "新 token 单独 decode，宽度只有一个 token。只计算它自己的 key 和 value，"
        "旧的直接从缓存读取。单元数：之前 {before}，之后 {after}。"
    ),
    "loop.guess_next.q": "在这句话后面，下一个 token 是什么？\n  {prompt}\n输入你的答案（开头的空格不计），按 Enter。",
    "loop.guess_next.why": (
        "llama.cpp 给出的最高 logit 是 id {id}，{piece!r}。小模型常常挑一个常见的接续，"
        "而不是你心里想的那个事实。"
    ),
    "loop.guess_cells.q": (
        "缓存里有 {before} 个单元。选中的 token 用一次 llama_decode 送回去。之后有多少个单元？"
    ),
    "loop.guess_cells.why": "进来一个 token，就多一个单元：原来的 {before} 个原封不动，这正是缓存的意义。",
    "tokens.title": "token 不等于词",
    "tokens.word": (
        "词表由从文本中学到的片段组成。单词 {word!r} 是 {n} 个 token：\n  {pieces}\n"
        "常见的词占一个片段，少见的词由几个片段拼成。"
    ),
    "tokens.guess.q": "汉字 {hanzi} 的 UTF-8 编码有 {utf8} 个字节。这个词表要用几个 token 表示它？",
    "tokens.guess.why": (
        "它的片段：{pieces}。显示为 <0xNN> 的片段只是一个字节，不是完整的字符："
        "要等相邻的片段都到齐，才能读出来。"
    ),
    "tokens.chat": (
        "聊天消息会被模型的聊天模板包起来。{f.message!r} 单独是 {f.plain_count} 个 token；"
        "放进模板后是 {f.chat_count} 个，包装多花了 {extra} 个：\n  {pieces}\n"
        "上下文长度、速度和价格都按这些 token 计算，而不是按字数。"
    ),
    "batch.title": "prefill 宽，decode 窄",
    "batch.intro": (
        "提示词的所有 token 事先都已知道，所以可以并排一起送进模型。"
        "生成的 token 要等上一步算完才存在，所以生成阶段每次调用只前进一个 token。"
    ),
    "batch.guess.q": "提示词有 {n} 个 token。它的 prefill 需要几次 llama_decode 调用？",
    "batch.guess.why": "一次调用最多装下 batch 大小（-b，这里是 {b}）个 token：{n} 个 token 需要 ceil({n}/{b}) 次宽调用。",
    "batch.times": (
        "刚刚在这台机器上测得：\n"
        "  prefill：{f.n_prompt} 个 token 用了 {f.prefill_ms:.1f} ms（每个 {f.ms_per_prompt_token:.2f} ms）\n"
        "  decode： 1 个 token 用了 {f.decode_ms:.1f} ms（{f.n_decodes} 步的中位数）\n"
        "这次宽调用的耗时相当于 {ratio:.1f} 次单 token 调用，却带了 {f.n_prompt} 个 token：权重只为整个 batch 读一遍，"
        "而在 CPU 上，读权重占了一次小 decode 的大部分时间。"
    ),
    "sampler.title": "从 logits 到一个 token",
    "sampler.probs": "softmax 把 {n_vocab:,} 个 logits 变成总和为 1 的概率。最大的五个：\n{top}",
    "sampler.chain": (
        "llama.cpp 的默认采样器链一级一级地削减候选（每一级之后剩下的数量）：\n{stages}\n"
        "削减完之后，dist 才从剩下的里面抽出一个 token。"
    ),
    "sampler.guess.q": (
        "第二个候选是 {piece!r}，p = {p:.3f}。top-p {top_p} 从最可能的开始保留，"
        "直到累计概率达到 {top_p}。它会留下这个候选吗？"
    ),
    "sampler.guess.why": "top-p {top_p} 留下了 {kept} 个候选：累计概率一达到 {top_p} 就停。",
    "inside.title": "一次 decode 的内部",
    "inside.graph": (
        "一次 decode 分两段：先把要做的运算描述成一张图，然后由后端在硬件上算出来。图里依次是嵌入、n_layer 个由注意力和前馈网络组成的块、"
        "最后的归一化、输出头。\n"
        "注意力只能往回看。对 {n} 个 token，因果掩码让第 i 行只看到第 0 到第 i 列（只画前几行）：\n{tri}"
    ),
    "inside.guess.q": "在 {n} x {n} 的掩码里，注意力可以用到多少个格子？",
    "inside.guess.why": "对角线和它下面的全部：n(n+1)/2。另外 {masked} 个在 softmax 之前被设成负无穷，权重为 0。",
    "inside.attn": (
        "从第 {f.layer} 层的 softmax 复制出来的权重（{f.n_head} 个头）：\n"
        "  落在未来 token 上的最大权重：{f.above_diagonal}\n"
        "  |行和 - 1| 的最大值：{f.row_sum_err:.1e}\n"
        "最后一个 token {f.last_piece!r} 最关注 {f.top_piece!r}（{f.top_weight:.2f}，各头平均）。"
    ),
    "lens.intro": (
        "每一层都以节点 l_out-N 结束：第 N 层之后的残差流。logit lens 把这一行送进模型自己的"
        "输出头（最后的归一化，再乘输出矩阵），就像模型在这一层停下。层从 0 数到 {last}；"
        "实验在同一次 prefill 里对提示的最后一个位置做了这件事。"
    ),
    "lens.guess.q": "这里 llama.cpp 自己的 top-1 是 {piece!r}（id {id}）。哪一层的 lens 最先把它排进前 5？",
    "lens.guess.why": (
        "第 {top5} 层是第一个把 {piece!r} 排进前 5 的层；lens 第一次把它排在第一是第 {top1} 层。"
        "最后一层的 lens 就是 llama.cpp 自己的 logits，只差输出头的 8 位舍入（见下一页）。"
    ),
    "lens.never": "没有",
    "lens.result": (
        "最后一层（第 {last} 层）的 lens 就是在这里重新算一遍 llama.cpp 自己的 logits："
        "整个词表上的最大 |差| 为 {d:.3f}。{bound}\n输出头：{head}。"
    ),
    "lens.bound": (
        "llama.cpp 在乘量化的输出头之前把归一化后的行舍入到 8 位，这最多能让一个 logit 移动 "
        "{bound:.2f}；上面的差别在这个范围之内。"
    ),
    "lens.head_read": "从 GGUF 文件读取输出头用了 {ms:,.0f} ms（每个模型一次）。",
    "lens.no_bound": "差别来自舍入：这种输出头的类型，lens 没有给出舍入的上界。",
    "lens.skip": "logit lens 读不了这个模型的输出头，这个猜测跳过：{detail}",
    "pane.lens": "在应用里：第 8 栏，logit lens。",
    "exact.title": "为什么缓存是精确的",
    "exact.intro": (
        "过去某个 token 的 key 和 value 只取决于它前面的 token，而掩码挡住了后来的 token。"
        "所以它们一旦算出就固定下来，留着它们不会丢失任何信息。验证办法：在一个什么都没缓存的新上下文里重算。"
    ),
    "exact.zero": "正好是 0",
    "exact.small": "大于 0，小于 0.01",
    "exact.large": "0.01 或更大",
    "exact.guess.q": (
        "第二个上下文把同样的 {calls} 次 decode 调用在这 {n} 个 token 上重放一遍，"
        "不用第一个上下文的任何缓存。两行 logits 最多相差多少？"
    ),
    "exact.guess.why": "实测：max |Δ| = {d}。同样的调用、同样的内核、同样的输入：缓存的结果和重算的结果是同一笔算术。",
    "exact.batched": (
        "如果改成 {f.batched_calls} 次宽调用重算，max |Δ| = {f.batched_max:.4f}；top-1 相同：{agree}。"
        "形状不同的 batch 在某些内核里舍入方式不同（flash attention {f.flash_attn}）；那是舍入，不是缓存的问题。"
    ),
    "wall.title": "平方墙",
    "wall.intro": "如果不用缓存，每生成一个 token，就得让整段上下文从头再过一遍模型。我们一次调用送一个 token，共送 {n} 个，两种方式都数一数。",
    "wall.guess.q": "送完 {n} 个 token 后，没有缓存的循环一共要做多少次 token 前向？",
    "wall.guess.why": "1 + 2 + ... + n = n(n+1)/2 = {formula}：它随 n 的平方增长。",
    "wall.table": (
        "按实际运行的 decode 调用数出来（上下文，有缓存，无缓存）：\n{table}\n"
        "合计：有缓存 {w}，无缓存 {wo}；n(n+1)/2 = {formula}。缓存省下了 {ratio:.1f} 倍。"
    ),
    "ram.title": "缓存占多少内存",
    "ram.guess.q": "在 {name} 的 KV cache 里，一个 token 占多少字节？",
    "ram.guess.why": "每一层为每个 token 存一行 K 和一行 V，每行 n_head_kv x head_dim 个值。",
    "ram.formula": (
        "{f.n_layer} 层 x (K {f.n_head_kv}x{f.head_dim_k} {f.type_k} = {f.k_row} B + V {f.n_head_kv}x{f.head_dim_v} {f.type_v} = {f.v_row} B) = 每个 token {f.bytes_per_token:,} B。\n"
        "如果每个查询头（{f.n_head} 个）都有自己的 K/V 头，就要 {f.mha_bytes_per_token:,} B：分组查询注意力让多个头共用一个 K/V 头。"
    ),
    "ram.cache": "  {kind}：{cells:,} 个单元 x {layers} 层：我们算出 {ours:.2f} MiB，llama.cpp 日志 {logged:.2f} MiB，一致：{ok}",
    "ram.no_log": "  （这里没有上下文：没有日志可以对照）",
    "ram.big": (
        "一个更大的模型，按输入的尺寸（32 层，8 个 128 维的 K/V 头，f16）：每个 token {per:,} B，"
        "所以 {ctx:,} 个 token 的上下文还没算权重就要 {mib:,.0f} MiB。"
    ),
    "full.title": "上下文满了以后",
    "full.stop": "一个 {n} token 的上下文被填满了。用 --context-full stop，生成在 {at} 个 token 时结束：{reason!r}。",
    "full.guess.q": "用 --context-full shift 和 --keep {keep}，这 {past} 个 token 必须腾出位置。平移会忘掉多少个？",
    "full.guess.why": "保留部分之后的一半：(n_past - n_keep) / 2，向下取整。",
    "full.shift": (
        "平移保留了 {f.n_keep} 个，从 {f.n_past} 个里丢掉 {f.n_discard} 个，其余的往前挪；现在有 {f.after} 个 token。"
        "被忘掉、注意力再也看不到的：\n  {gone}"
    ),
    "prefix.title": "跨轮次的前缀缓存",
    "prefix.intro": "第二轮对话会重复第一轮的提示词和回复，再加上新消息。第一轮留在缓存里的部分不必再 decode 一次。",
    "prefix.guess.q": "第二轮的提示词有 {n} 个 token。要 decode 多少个？",
    "prefix.guess.why": "只有和缓存最长公共前缀之后的 token（至少一个，用来得到最后位置的 logits）。",
    "prefix.result": (
        "第 1 轮：提示词 {f.first_tokens} 个 token，然后回复 {f.reply_tokens} 个。\n"
        "第 2 轮：{f.second_tokens} 个 token，缓存里找到 {f.reused} 个，decode 了 {f.computed} 个。\n"
        "prefill 用时：{f.first_ms:.1f} ms，然后 {f.second_ms:.1f} ms。"
    ),
    "skip.no_context": "这一章需要一个自己的 llama.cpp 上下文，而这里的模型跑在服务器上：跳过。",
    "skip.error": "这一章在这里无法运行：{detail}",
    "ui.chapter": "第 {i}/{n} 章",
    "ui.score": "得分 {right}/{asked}",
    "ui.keys": "Enter/→ 继续  ← 返回  q/Esc 离开",
    "ui.keys_choice": "1-{n} 作答",
    "ui.keys_typed": "输入后按 Enter（留空：跳过）",
    "ui.running": "正在模型上运行这一章……",
    "ui.right": "答对了：{answer}。",
    "ui.wrong": "差一点：答案是 {answer}。",
    "ui.end": (
        "导览结束。你猜对了 {right}/{asked} 题。你看到的每个数字都来自 llama.cpp 在这个模型上的运行。"
        "按 q 离开，按 ← 返回。"
    ),
}
