/* kernels.ptx and kernels_pdl.ptx as NUL-terminated strings, e0_gpu_ptx
 * and e0_gpu_ptx_pdl (gpu/gpu.c hands one to the driver). The paths are
 * relative to the repository root, where make runs. */
    .section .rodata
    .global e0_gpu_ptx
    .type e0_gpu_ptx, @object
    .balign 16
e0_gpu_ptx:
    .incbin "src/gpu/kernels.ptx"
    .byte 0
    .size e0_gpu_ptx, . - e0_gpu_ptx
    .global e0_gpu_ptx_pdl
    .type e0_gpu_ptx_pdl, @object
    .balign 16
e0_gpu_ptx_pdl:
    .incbin "src/gpu/kernels_pdl.ptx"
    .byte 0
    .size e0_gpu_ptx_pdl, . - e0_gpu_ptx_pdl
    .section .note.GNU-stack, "", @progbits
