/** Lower-case words (letters, with inner apostrophes as in "don't" or "l'église"), in order. */
export function words(text: string): string[] {
  return (
    text
      .normalize("NFC")
      .toLowerCase()
      .match(/\p{L}+(?:['’]\p{L}+)*/gu) ?? []
  ).map((word) => word.replace(/’/g, "'"));
}
