// The subcommands of the ridge binary. Each parses its own flags from Args and returns
// the process exit code; a ridge::Error thrown out of one is printed by main.
#pragma once
#include "cli/args.h"

namespace ridge::cli {

int cmd_generate(Args& a);
int cmd_mkmodel(Args& a);
int cmd_quantize(Args& a);
int cmd_convert(Args& a);
int cmd_perplexity(Args& a);
int cmd_info(Args& a);
int cmd_chat_template(Args& a);
int cmd_tokenize(Args& a);
int cmd_bench(Args& a);
int cmd_peaks(Args& a);
int cmd_serve(Args& a);
int cmd_router(Args& a);
int cmd_roofline(Args& a);
int cmd_tune_kernels(Args& a);
int cmd_tune(Args& a);
int cmd_grammar(Args& a);

}  // namespace ridge::cli
