/* shmapctl: commands on shard_map programs (.shmap files, docs/programs.md).
 *   check  — parse and verify a program; print each value's block type and
 *            varying axes, or the first error as "file:line:col: sentence".
 *   run    — run a program; --local runs every device as a thread of this
 *            process (sm_exec_local) on .npy arguments and writes .npy
 *            results (without --local the service runs it: cmd_run.c). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "cli.h"

#include "sm_array.h"
#include "sm_example.h"
#include "sm_exec.h"
#include "sm_exec_local.h"
#include "sm_file.h"
#include "sm_ir.h"
#include "sm_lower.h"

enum { OPT_NO_CHECK_VMA = 256, OPT_JSON, OPT_LOWERED, OPT_ENTRY };

static const char check_help[] =
    "Usage: shmapctl check PROGRAM.shmap [--entry NAME] [--lowered] [--no-check-vma]\n"
    "                      [--json]\n"
    "\n"
    "Parses and verifies a program (docs/programs.md) as the coordinator would before\n"
    "running it, and prints every value with its type. Needs no server.\n"
    "\n"
    "A shard_map function: block shapes from the in_specs, the dtype and shape of\n"
    "every op, out_specs and result global shapes, and the replication check;\n"
    "each value prints with its block type and the mesh axes it may vary over,\n"
    "e.g. \"z = dot(a, b) : f32[2,32]{V:i,j}\".\n"
    "\n"
    "A jit (global-view) function: every value prints with its type as\n"
    "jax.typeof prints it, sharding included, e.g. \"ans = add(x, y) :\n"
    "i32[4@X,8@Y]\"; programs JAX refuses are refused with its sentence. With\n"
    "--lowered, the shard_map program the service runs follows, with every\n"
    "collective the lowering inserted.\n"
    "\n"
    "The first error prints as \"file:line:col: sentence\".\n"
    "\n"
    "Options:\n"
    "      --entry NAME     check function NAME (default: the last shard_map or jit\n"
    "                       function of the file)\n"
    "      --lowered        jit: also print the lowered shard_map program\n"
    "      --no-check-vma   turn the replication check off (check_vma=False); a\n"
    "                       file whose first lines hold the comment\n"
    "                       \"# check_vma: false\" turns it off too\n"
    "      --json           print JSON: file, name, kind (shard_map or jit),\n"
    "                       check_vma, mesh {axes, sizes, axis_types, devices}, values [{name,\n"
    "                       type, line}] (line 0 for parameters), outputs [{type}],\n"
    "                       lines (the description, one string per line) and, for\n"
    "                       jit, lowered (the shard_map program's text); on error\n"
    "                       {file, error} and exit 1\n"
    "  -h, --help           show this help\n"
    "\n"
    "Exit codes: 0 valid, 1 invalid program (or unreadable file), 2 usage error.\n"
    "\n"
    "Examples:\n"
    "  shmapctl check examples/matmul_basic.shmap\n"
    "  shmapctl check examples/matmul_explicit_rs.shmap --lowered\n";

static int cli_check_fail(int json, const char *path, const char *msg)
{
    if (!json)
        return cli_fail(CLI_EXIT_INVALID, "%s", msg);
    json_t *o = json_object();
    if (o) {
        json_object_set_new(o, "file", json_string(path));
        json_object_set_new(o, "error", json_string(msg));
    }
    cli_print_json(o);
    return CLI_EXIT_INVALID;
}

/* The JSON of a value list: [{name, type, line}] and outputs [{type}]. */
static void cli_check_json_values(json_t *o, const sm_program *p)
{
    json_t *vals = json_array(), *outs = json_array();
    char ty[400];
    for (int v = 0; vals && v < p->nvalues; v++) {
        const sm_ir_value *x = &p->values[v];
        json_t *e = json_object();
        json_object_set_new(e, "name", json_string(x->name ? x->name : ""));
        json_object_set_new(e, "type", json_string(sm_program_value_type(p, v, ty, sizeof ty)));
        json_object_set_new(e, "line", json_integer(x->def >= 0 ? p->ops[x->def].line : 0));
        json_array_append_new(vals, e);
    }
    for (int k = 0; outs && k < p->nreturns; k++) {
        json_t *e = json_object();
        json_object_set_new(e, "type", json_string(sm_program_output_type(p, k, ty, sizeof ty)));
        json_array_append_new(outs, e);
    }
    json_object_set_new(o, "values", vals);
    json_object_set_new(o, "outputs", outs);
}

static int cli_check_run(const char *path, const char *entry, int no_vma, int json, int lowered)
{
    char err[2048] = "";
    char *text = NULL;
    sm_program *p = NULL, *l = NULL;
    sm_strbuf out = {0}, low = {0};
    int rc = CLI_EXIT_INVALID;
    if (sm_file_read_text(path, 0, &text, err, sizeof err)) {
        rc = cli_check_fail(json, path, err);
        goto done;
    }
    int check_vma = !no_vma && sm_exec_text_check_vma(text);
    if (sm_program_parse_entry(text, path, entry, &p, err, sizeof err) ||
        sm_program_verify(p, check_vma, err, sizeof err)) {
        rc = cli_check_fail(json, path, err);
        goto done;
    }
    if (p->kind == SM_PROG_JIT && (lowered || json)) {
        if (sm_lower(p, NULL, &l, err, sizeof err)) {
            rc = cli_check_fail(json, path, err);
            goto done;
        }
        if (sm_program_print(l, &low)) {
            rc = cli_fail(CLI_EXIT_INVALID, "out of memory printing '%s'", path);
            goto done;
        }
    }
    if (sm_program_describe(p, &out)) {
        rc = cli_fail(CLI_EXIT_INVALID, "out of memory describing '%s'", path);
        goto done;
    }
    if (!json) {
        fputs(sm_strbuf_str(&out), stdout);
        if (lowered && l) {
            int n[SM_OP_COUNT];
            int total = sm_lower_count_collectives(l, n);
            printf("\n# lowered to this shard_map program (%d collective%s):\n", total,
                   total == 1 ? "" : "s");
            fputs(sm_strbuf_str(&low), stdout);
        } else if (lowered) {
            printf("\n# a shard_map program is run as it is: nothing to lower\n");
        }
        rc = CLI_EXIT_OK;
        goto done;
    }
    json_t *o = json_object(), *lines = json_array();
    if (o && lines) {
        json_object_set_new(o, "file", json_string(path));
        json_object_set_new(o, "name", json_string(p->name ? p->name : "f"));
        json_object_set_new(o, "kind", json_string(p->kind == SM_PROG_JIT ? "jit" : "shard_map"));
        json_object_set_new(o, "check_vma", json_boolean(check_vma));
        sm_mesh m = p->mesh; /* with the axis types the program declares */
        m.auto_axes = p->kind == SM_PROG_JIT ? p->auto_axes : 0;
        json_object_set_new(o, "mesh", cli_json_mesh(&m));
        cli_check_json_values(o, p);
        char *s = (char *)sm_strbuf_str(&out);
        for (char *line = strtok(s, "\n"); line; line = strtok(NULL, "\n"))
            json_array_append_new(lines, json_string(line));
        json_object_set(o, "lines", lines);
        if (l)
            json_object_set_new(o, "lowered", json_string(sm_strbuf_str(&low)));
    }
    json_decref(lines);
    rc = cli_print_json(o);
done:
    sm_strbuf_free(&out);
    sm_strbuf_free(&low);
    sm_program_free(p);
    sm_program_free(l);
    free(text);
    return rc;
}

/* The one PROGRAM argument left after the options: CLI_EXIT_OK, or the
 * usage error. */
static int program_arg(const char *cmd, int argc, char **argv)
{
    if (optind >= argc)
        return cli_usage(cmd, "a program file is required");
    if (optind + 1 < argc)
        return cli_usage(cmd, "unexpected argument '%s'", argv[optind + 1]);
    return CLI_EXIT_OK;
}

int cli_cmd_check(int argc, char **argv)
{
    static const struct option opts[] = {
        {"no-check-vma", no_argument, NULL, OPT_NO_CHECK_VMA},
        {"json", no_argument, NULL, OPT_JSON},
        {"lowered", no_argument, NULL, OPT_LOWERED},
        {"entry", required_argument, NULL, OPT_ENTRY},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int no_vma = 0, json = 0, lowered = 0, rc;
    const char *entry = NULL;
    for (int c, first = 1; (c = cli_getopt(argc, argv, opts, check_help, first)) != -1; first = 0) {
        switch (c) {
        case CLI_OPT_HELP:
            return CLI_EXIT_OK;
        case OPT_NO_CHECK_VMA:
            no_vma = 1;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case OPT_LOWERED:
            lowered = 1;
            break;
        case OPT_ENTRY:
            entry = optarg;
            break;
        default:
            return cli_getopt_error("check", c, argv);
        }
    }
    if ((rc = program_arg("check", argc, argv)))
        return rc;
    return cli_check_run(argv[optind], entry, no_vma, json, lowered);
}

static const char run_help[] =
    "Usage: shmapctl run --local PROGRAM.shmap [--arg NAME=FILE.npy ...]\n"
    "                    [--inputs FILE.inputs] [--out DIR] [--entry NAME]\n"
    "                    [--no-check-vma]\n"
    "\n"
    "Runs a program on GLOBAL arguments, as jax.shard_map(f, mesh, in_specs,\n"
    "out_specs)(*args) or, for a jit function, jax.jit(f)(*args) does (lowered\n"
    "to shard_map first, as the service does). With --local, every device of the\n"
    "program's mesh runs as a thread of this process with in-process\n"
    "collectives; no server is needed. Results are written as DIR/out0.npy,\n"
    "DIR/out1.npy, ... (one per returned value) and summarised on stdout.\n"
    "\n"
    "Options:\n"
    "      --local            run in this process (required for now)\n"
    "      --arg NAME=FILE    the .npy file of parameter NAME (dtype and global\n"
    "                         shape must match the program); repeatable\n"
    "      --inputs FILE      generate the arguments not given by --arg from an\n"
    "                         examples/*.inputs file (examples/README.md)\n"
    "      --out DIR          directory for the results (created if missing);\n"
    "                         default: no files, only the summary\n"
    "      --entry NAME       run function NAME of the file (default: the last\n"
    "                         shard_map or jit function)\n"
    "      --no-check-vma     turn the replication check off\n"
    "  -h, --help             show this help\n"
    "\n"
    "Exit codes: 0 success, 1 invalid program, argument or failed run, 2 usage error.\n"
    "\n"
    "Example:\n"
    "  shmapctl run --local examples/slice_and_average.shmap \\\n"
    "      --inputs examples/slice_and_average.inputs --out /tmp\n";

#define CLI_RUN_MAXARGS 64

/* Prints up to 16 elements of a small result. */
static void cli_run_print_values(const sm_array *a)
{
    int64_t n = a->nbytes / (int64_t)sm_dtype_size(a->dtype), shown = n < 16 ? n : 16;
    double v[16];
    char err[128];
    if (n == 0 || sm_kern_astype(a->dtype, a->data, SM_F64, v, shown, err, sizeof err))
        return;
    printf("  [");
    for (int64_t k = 0; k < shown; k++)
        printf("%s%.9g", k ? ", " : "", v[k]);
    printf("%s]\n", n > shown ? ", ..." : "");
}

static int cli_run_local(const char *path, const char *entry, char **args, int nargs,
                         const char *inputs, const char *outdir, int no_vma)
{
    char err[2048] = "", *text = NULL, *itext = NULL;
    sm_program *p = NULL;
    sm_array *in[CLI_RUN_MAXARGS] = {0}, *gen[CLI_RUN_MAXARGS] = {0};
    sm_array *out[CLI_RUN_MAXARGS] = {0};
    int rc = CLI_EXIT_INVALID;
    if (sm_file_read_text(path, 0, &text, err, sizeof err)) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
        goto done;
    }
    if (sm_program_parse_entry(text, path, entry, &p, err, sizeof err) ||
        sm_program_verify(p, !no_vma && sm_exec_text_check_vma(text), err, sizeof err)) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
        goto done;
    }
    if (p->kind == SM_PROG_JIT) { /* run the shard_map program it lowers to */
        sm_program *l = NULL;
        if (sm_lower(p, NULL, &l, err, sizeof err)) {
            rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
            goto done;
        }
        sm_program_free(p);
        p = l;
    }
    if (p->nparams > CLI_RUN_MAXARGS || p->nreturns > CLI_RUN_MAXARGS) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s: more than %d parameters or outputs", path,
                      CLI_RUN_MAXARGS);
        goto done;
    }
    for (int k = 0; k < nargs; k++) {
        char *eq = strchr(args[k], '=');
        int i = 0;
        if (!eq) {
            rc = cli_usage("run", "--arg takes NAME=FILE.npy, got '%s'", args[k]);
            goto done;
        }
        *eq = '\0';
        while (i < p->nparams && strcmp(p->params[i].name, args[k]))
            i++;
        if (i == p->nparams) {
            rc = cli_fail(CLI_EXIT_INVALID, "--arg %s: the program has no parameter '%s'", args[k],
                          args[k]);
            goto done;
        }
        if (sm_npy_read(eq + 1, &in[i], err, sizeof err)) {
            rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
            goto done;
        }
    }
    if (inputs) {
        if (sm_file_read_text(inputs, 0, &itext, err, sizeof err) ||
            sm_example_inputs(itext, p, gen, err, sizeof err)) {
            rc = cli_fail(CLI_EXIT_INVALID, "%s: %s", inputs, err);
            goto done;
        }
        for (int i = 0; i < p->nparams; i++)
            if (!in[i]) {
                in[i] = gen[i];
                gen[i] = NULL;
            }
    }
    for (int i = 0; i < p->nparams; i++)
        if (!in[i]) {
            rc = cli_usage("run", "parameter '%s' has no --arg", p->params[i].name);
            goto done;
        }
    if (sm_exec_local_run(p, in, out, NULL, err, sizeof err)) {
        rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
        goto done;
    }
    if (outdir && mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        rc = cli_fail(CLI_EXIT_INVALID, "--out %s: cannot create the directory: %s", outdir,
                      strerror(errno));
        goto done;
    }
    for (int r = 0; r < p->nreturns; r++) {
        char shape[128], file[4096] = "";
        if (outdir) {
            snprintf(file, sizeof file, "%s/out%d.npy", outdir, r);
            if (sm_npy_write(file, out[r], err, sizeof err)) {
                rc = cli_fail(CLI_EXIT_INVALID, "%s", err);
                goto done;
            }
        }
        printf("output %d: %s%s%s%s\n", r, sm_dtype_name(out[r]->dtype),
               sm_shape_format(&out[r]->shape, shape, sizeof shape), file[0] ? " -> " : "", file);
        cli_run_print_values(out[r]);
    }
    rc = CLI_EXIT_OK;
done:
    for (int i = 0; i < CLI_RUN_MAXARGS; i++) {
        sm_array_free(in[i]);
        sm_array_free(gen[i]);
        sm_array_free(out[i]);
    }
    sm_program_free(p);
    free(text);
    free(itext);
    return rc;
}

int cli_run_service(int argc, char **argv); /* cmd_run.c */

int cli_cmd_run(int argc, char **argv)
{
    /* Without --local the program runs on the service (cmd_run.c). */
    int is_local = 0;
    for (int k = 1; k < argc; k++)
        is_local |= !strcmp(argv[k], "--local");
    if (!is_local)
        return cli_run_service(argc, argv);

    enum { OPT_LOCAL = 300, OPT_ARG, OPT_INPUTS, OPT_OUT, OPT_NOVMA, OPT_RUN_ENTRY };
    static const struct option opts[] = {
        {"local", no_argument, NULL, OPT_LOCAL},
        {"entry", required_argument, NULL, OPT_RUN_ENTRY},
        {"arg", required_argument, NULL, OPT_ARG},
        {"inputs", required_argument, NULL, OPT_INPUTS},
        {"out", required_argument, NULL, OPT_OUT},
        {"no-check-vma", no_argument, NULL, OPT_NOVMA},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    char *args[64];
    int nargs = 0, local = 0, no_vma = 0, rc;
    const char *inputs = NULL, *outdir = NULL, *entry = NULL;
    for (int c, first = 1; (c = cli_getopt(argc, argv, opts, run_help, first)) != -1; first = 0) {
        switch (c) {
        case CLI_OPT_HELP:
            return CLI_EXIT_OK;
        case OPT_LOCAL:
            local = 1;
            break;
        case OPT_ARG:
            if (nargs == 64)
                return cli_usage("run", "at most 64 --arg options");
            args[nargs++] = optarg;
            break;
        case OPT_INPUTS:
            inputs = optarg;
            break;
        case OPT_OUT:
            outdir = optarg;
            break;
        case OPT_NOVMA:
            no_vma = 1;
            break;
        case OPT_RUN_ENTRY:
            entry = optarg;
            break;
        default:
            return cli_getopt_error("run", c, argv);
        }
    }
    if ((rc = program_arg("run", argc, argv)))
        return rc;
    if (!local)
        return cli_usage("run", "only --local is supported for now");
    return cli_run_local(argv[optind], entry, args, nargs, inputs, outdir, no_vma);
}
