/**
 * What a task may come with besides its text: documents to work on, a single text, and named values
 * that fill tool arguments of the same name.
 */
import { z } from "zod";

export const PlannerDocumentSchema = z.object({
  /** Stable id, also how a task names a document ("… the document en-rail-delays"). */
  id: z.string().min(1).max(200),
  title: z.string().max(500).optional(),
  text: z.string().min(1),
});
export type PlannerDocument = z.infer<typeof PlannerDocumentSchema>;

export const PlannerInputsSchema = z.looseObject({
  documents: z.array(PlannerDocumentSchema).max(10_000).optional(),
  /** One text to work on when there are no documents. */
  text: z.string().min(1).optional(),
});
export type PlannerInputs = z.infer<typeof PlannerInputsSchema>;
