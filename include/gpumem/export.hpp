/**
 * @file export.hpp
 * Symbol visibility for gpumem's compiled library. The library builds with hidden visibility; public
 * entities that live in the compiled part carry GPUMEM_EXPORT.
 */
#pragma once

#if defined(GPUMEM_STATIC_DEFINE)
#define GPUMEM_EXPORT
#elif defined(_WIN32)
#define GPUMEM_EXPORT __declspec(dllexport)
#else
#define GPUMEM_EXPORT __attribute__((visibility("default")))
#endif
